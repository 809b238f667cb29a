"""How long the commands the pages name take, as measured: one record that the README, `lra list`,
the commands' --help and docs/ quote, so they cannot disagree.

timings.json (beside this module, so an installed copy reads it too) holds each claim's text, the
places that quote it and the measurements it rests on, each with its source: the committed run
folders (final.json's wall_time_s, through the tables' rows: the figures docs/status.md gives),
results/fit_screen/fit.json (steps/s), results/screen/screen.json (the screen's times),
results/ledger.json and the GPU rows' reports under
results/accelerator/, and NOTED, the measurements no committed file holds (a commit or an issue
says where each was made). `lra table --committed` rewrites the record with the tables, `lra table
--check` (CI) fails when it differs from what they give, and tests/test_docs.py checks that every
place named quotes the claim's text. Reading the record needs neither JAX nor pandas.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

RECORD = Path(__file__).with_name("timings.json")

# Measurements that no committed file holds, each with where it was made. Wall times of the whole
# command (its data made and its programs compiled included), unlike a run folder's wall_time_s.
NOTED = {
    "demo": [
        {"seconds": 150, "cores": 2, "load": "idle",
         "what": "`lra` from a fresh clone with an empty data cache, twice: about 2.5 min each",
         "date": "2026-11-29", "source": "commit 917a433"},
        {"seconds": 326, "cores": 2, "load": "busy",
         "what": "`lra` from a fresh clone, tried as a new user would, with training runs on both "
                 "cores: 5 min 26 s", "source": "issue 80"},
    ],
    "fit": [
        {"seconds": 130, "cores": 2, "load": "busy",
         "what": "`lra check FILE.py:CLASS --fit` of a user's own dilated convolution, with "
                 "training runs on both cores: 2 min 10 s", "source": "issue 80"},
    ],
    "screen": [
        {"seconds": 48, "probe_seconds": 9, "cores": 1, "load": "busy",
         "what": "`lra check my_layers/mean_gate.py:MeanGate --screen` (the README's layer), "
                 "contract included, on one core beside a training run: 48 s; its ETA said 32 s "
                 "and its two runs took 31 s", "date": "2026-12-04",
         "source": "the commit that adds results/screen/ (issue 80)"},
    ],
}
# The GPU rows' reports of the paper ListOps Latte row under sorted micro-batches (the preset's
# batching since issue 57); the ledger's row gives the whole row's minutes from them.
PAPER_ROW = "listops-latte-paper-seed0"
PAPER_REPORTS = ("accelerator/2026-12-04_nvidia-h200_rows/rows_call1.json",
                 "accelerator/2026-12-04_nvidia-h200_rows/rows_call2.json")
FIT_SOURCE = "fit_screen/fit.json"
SCREEN_SOURCE = "screen/screen.json"


@functools.cache
def _record() -> dict[str, Any]:
  return json.loads(RECORD.read_text())


def text(claim: str) -> str:
  """The claim's text as every place quotes it, e.g. "~2.5 min on 2 idle cores, ..."."""
  return _record()["claims"][claim]["text"]


def _minutes(seconds: float) -> str:
  """"14 s", "2.5 min", "17 min": one decimal under ten minutes, where it still says something."""
  if seconds < 60:
    return f"{seconds:.0f} s"
  minutes = seconds / 60
  return f"{minutes:.1f} min" if minutes < 10 else f"{minutes:.0f} min"


def _spans(status: Any, task: str, preset: str) -> tuple[str, list[dict[str, Any]]]:
  """"42 min to 4h12" over a preset's tabled rows (each the mean of its seeds: the figures
  docs/status.md gives, with the mixers), and those rows as measurements."""
  from lra.report.table_markdown import _duration  # pylint: disable=import-outside-toplevel
  rows = status._task(task, preset)  # pylint: disable=protected-access
  measured = [{"mixer": r["mixer"], "runs": int(r.get("num_runs", 1)),
               "seconds": round(float(r["wall_time_s"]), 1)} for r in rows]
  low, high = (_duration(f([m["seconds"] for m in measured])) for f in (min, max))
  if low.endswith(" min") and high.endswith(" min"):
    return f"{low.removesuffix(' min')}-{high}", measured
  return f"{low} to {high}", measured


def build(task_rows: dict[str, list[dict[str, Any]]], results_dir: Path) -> dict[str, Any]:
  """The record, from the committed results folder and NOTED."""
  from lra.report import ledger  # pylint: disable=import-outside-toplevel
  from lra.report.table_status import Status  # pylint: disable=import-outside-toplevel
  results_dir = Path(results_dir)
  status = Status(task_rows, results_dir)
  claims: dict[str, dict[str, Any]] = {}

  # The demo: Latte's committed demo runs (training only) and the whole command, NOTED.
  runs = []
  for final_path in sorted(results_dir.glob("runs/listops/latte/demo_seed*/final.json")):
    final = json.loads(final_path.read_text())
    if final.get("status") == "complete":
      runs.append({"seconds": round(final["wall_time_s"], 1), "load": "not recorded",
                   "what": "the run's own wall time (its data made before it not counted)",
                   "source": f"{final_path.parent.relative_to(results_dir.parent)}/final.json"})
  measured = [*NOTED["demo"], *runs]
  idle = [m["seconds"] for m in measured if m.get("load") == "idle"]
  slowest = max(m["seconds"] for m in measured)
  claims["demo"] = {
      "command": "lra",
      "text": f"~{_minutes(min(idle))} on 2 idle cores, up to {_minutes(slowest)} on busy ones "
              "(measured)",
      "quoted_in": ["README.md", "docs/runs.md", "lra --help", "lra list"],
      "measured": measured}

  # The fitting screen: its 600 steps at each built-in mixer's measured speed on one core, and
  # one whole command, NOTED.
  fits = json.loads((results_dir / FIT_SOURCE).read_text())
  steps = 600
  fastest = max(fits, key=lambda f: f["steps_per_s"])
  slowest_fit = min(fits, key=lambda f: f["steps_per_s"])
  noted = NOTED["fit"][0]
  claims["fit"] = {
      "command": "lra check MIXER --fit",
      "text": f"{_minutes(steps / fastest['steps_per_s'])} to "
              f"{_minutes(steps / slowest_fit['steps_per_s'])} of training on one core at the "
              "built-in mixers' speeds, plus making the images and compiling; "
              f"{_minutes(noted['seconds'])} in all on busy cores (measured)",
      "quoted_in": ["docs/mixers.md", "lra check --help"],
      "measured": [{"mixer": f["mixer"], "steps_per_s": round(f["steps_per_s"], 2),
                    "seconds": round(steps / f["steps_per_s"], 1), "cores": 1,
                    "source": f"results/{FIT_SOURCE}"} for f in fits] + NOTED["fit"]}

  # The screen: each built-in mixer's two runs from scratch (data made and programs compiled
  # included; the mean of its seeds), on one core beside other runs, with this process's CPU time
  # beside (what a quiet core would take); and whole commands, NOTED.
  screens = {}
  for entry in json.loads((results_dir / SCREEN_SOURCE).read_text()):
    if not entry["spt"]:
      screens.setdefault(entry["mixer"], []).append(entry)
  screened = [{"mixer": mixer, "runs": len(entries),
               "seconds": round(sum(e["wall_s"] for e in entries) / len(entries), 1),
               "cpu_seconds": round(sum(e["cpu_s"] for e in entries) / len(entries), 1),
               "cores": 1, "load": "busy", "source": f"results/{SCREEN_SOURCE}"}
              for mixer, entries in sorted(screens.items())]
  walls = sorted(m["seconds"] for m in screened)
  cpus = sorted(m["cpu_seconds"] for m in screened)
  claims["screen"] = {
      "command": "lra check MIXER --screen",
      "text": f"{_minutes(walls[0])} to {_minutes(walls[-1])} for the built-in mixers on one "
              f"busy core ({_minutes(cpus[0])} to {_minutes(cpus[-1])} of CPU time), plus "
              f"~{_minutes(NOTED['screen'][0]['probe_seconds'])} timing its runs first (measured)",
      "quoted_in": ["README.md", "docs/mixers.md", "lra check --help"],
      "measured": screened + NOTED["screen"]}

  # The CPU presets' runs: each tabled row's wall time (the mean of its seeds).
  for claim, task, preset, where, quoted in (
      ("synthetic", "synthetic", "paper", "for the built-in mixers on a 2-core CPU, often beside "
       "another run", ["docs/mixers.md"]),
      ("listops_laptop", "listops", "laptop", "on a 2-core CPU",
       ["README.md", "docs/runs.md", "docs/presets_cpu.md", "lra list"]),
      ("pathfinder_laptop", "pathfinder", "laptop", "on one core beside another run",
       ["docs/runs.md", "lra list"]),
      ("squares", "pathfinder", "squares", "on one core beside another run",
       ["README.md", "lra list"])):
    span, rows = _spans(status, task, preset)
    claims[claim] = {
        "command": f"lra run {task} MIXER" + (f" --preset {preset}" if preset != "paper" else ""),
        "text": f"{span} {where} (measured)", "quoted_in": quoted,
        "measured": [{**r, "source": f"results/runs/{task}/{r['mixer']}/{preset}_seed*/final.json"}
                     for r in rows]}

  # The paper ListOps Latte row on an H200: the ledger's minutes (from the rows' speeds, with
  # its evaluations) and the rows' reports (each call's speed, a fresh machine's compiling).
  row = next(r for r in ledger.load(results_dir / "ledger.json") if r["id"] == PAPER_ROW)
  calls = []
  for report in PAPER_REPORTS:
    for entry in json.loads((results_dir / report).read_text())["rows"]:
      if entry["row"] == PAPER_ROW:
        calls.append({"steps_per_s": round(entry["steps_per_s"], 1),
                      "compile_s": entry["phases"]["compile"]["seconds"],
                      "fresh": entry["phases"]["state"]["step"] == 0,
                      "device": entry["device"], "source": f"results/{report}"})
  rates = sorted(c["steps_per_s"] for c in calls)
  compile_s = max(c["compile_s"] for c in calls if c["fresh"])
  claims["paper_h200"] = {
      "command": row["command"],
      "text": f"~{ledger.minutes(row, 'h200'):.0f} min on an H200 ({rates[0]:.1f}-{rates[-1]:.1f} "
              f"steps/s, evaluations included) plus ~{_minutes(compile_s)} compiling its "
              f"{ledger.programs(row)} programs on a fresh machine (measured)",
      "quoted_in": ["docs/accelerators.md", "lra list"],
      "measured": calls + [{"minutes": round(ledger.minutes(row, "h200"), 1),
                            "source": f"results/ledger.json, row {PAPER_ROW}: "
                                      f"{row['cost']['h200']['source']}"}]}
  return {"about": ("How long the commands the pages name take, as measured: each claim's text, "
                    "the places that quote it and the measurements it rests on. Generated by "
                    "`lra table --committed` (lra/report/timings.py); do not edit."),
          "claims": claims}


def render(task_rows: dict[str, list[dict[str, Any]]], results_dir: Path) -> str:
  return json.dumps(build(task_rows, results_dir), indent=1, ensure_ascii=False) + "\n"
