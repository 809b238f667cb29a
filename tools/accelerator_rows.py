"""Advances the ledger's first unfinished paper row on a lent GPU, within a wall-time budget.

  bash tools/accelerator_rows.sh OUT --budget-s 420 [--probe]       # on the lent machine
  python tools/accelerator_rows.py --adopt OUT                        # back here: put it in place
  python tools/accelerator_rows.py --quick --out OUT --results-dir R  # a CPU try-out (tests)

On the lent machine it picks the first row of results/ledger.json whose run folder is not
complete, unpacks that folder's committed archive (run.pack or its parts) if there is one, makes
the row's data on all host cores while the accelerator compiles the row's steps (a separate
process filling JAX's persistent compilation cache, which the run then reads), trains with
`lra run ... --stop-after` so the run ends, saved, before the budget, packs it into OUT and writes
OUT/rows.md and OUT/rows.json (the row, steps before and after, the best so far, steps/s, where
the minutes went). With --probe, tools/step_probe.py runs first (its report into OUT too) while
the data is made. Its working folder (.rows/, ignored by git) survives between calls to a warm
machine, so a second call reuses the data, the compiled steps and the newer state.

Back on the session's machine, --adopt OUT moves the archive into the row's run folder (replacing
the previous one, parts included) and its run files beside it, ready to commit.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PACK_RESERVE_S = 30  # packing (~20 MB), the report, the command's exit
# How each task's rows get their data: LRA's generated ListOps (the default recipe, whose stream
# states are recorded: the same files on any number of cores) and LRA's hard Pathfinder-32.
DATA = {
    "listops": {"generate": [], "cache": "listops"},
    "pathfinder": {"generate": ["--resolution", "32", "--difficulty", "hard", "--num-images",
                                "200000"], "cache": "pathfinder"},
}
QUICK_DATA = {"listops": ["--num-train", "512", "--num-val", "64", "--num-test", "64",
                          "--min-length", "8", "--max-length", "80", "--max-depth", "4",
                          "--max-args", "5"]}
# --quick: the row's command at a size a CPU runs in seconds (the run folder stays the row's).
QUICK_OVERRIDES = ("model.num_layers=1", "model.dim=32", "model.mlp_dim=64",
                   "train.batch_size=16", "train.num_steps=60", "train.log_every_steps=5",
                   "eval.every_steps=20", "eval.batch_size=32", "checkpoint.every_steps=20")
QUICK_SPEC = {"listops": {"vocab_size": 16, "seq_len": 64, "num_classes": 10}}  # QUICK_DATA's


def lra(*args: str) -> list[str]:
  return [sys.executable, "-m", "lra", *args]


class Session:
  """One call: its budget, folders, row and report."""

  def __init__(self, args: argparse.Namespace):
    from lra import ledger
    self.args, self.start = args, time.monotonic()
    self.deadline = self.start + args.budget_s
    self.out = Path(args.out)
    self.out.mkdir(parents=True, exist_ok=True)
    self.work = Path(args.work)
    self.work.mkdir(parents=True, exist_ok=True)
    self.results = self.work / "results"
    self.data_dir = self.work / "data"
    self.env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str((self.work / "jax_cache").resolve()),
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1", "PYTHONUNBUFFERED": "1"}
    rows = ledger.load(args.results_dir / "ledger.json")
    self.row = ledger.first_unfinished(rows, args.results_dir)
    self.report: dict[str, Any] = {"command": "python tools/accelerator_rows.py " + shlex.join(
        args.argv), "quick": args.quick, "budget_s": args.budget_s, "phases": {}}

  def left(self) -> float:
    return self.deadline - time.monotonic()

  def log(self, line: str) -> None:
    print(f"[{time.monotonic() - self.start:6.1f} s] {line}", flush=True)

  def child(self, cmd: list[str], log_name: str) -> subprocess.Popen:
    log = open(self.work / log_name, "a")  # pylint: disable=consider-using-with
    return subprocess.Popen(cmd, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)

  def write(self) -> None:
    self.report["wall_s"] = round(time.monotonic() - self.start, 1)
    (self.out / "rows.json").write_text(json.dumps(self.report, indent=1, default=str) + "\n")
    (self.out / "rows.md").write_text(render(self.report))


# ---------------------------------------------------------------------------------------------
# The pieces, in the order a call runs them.

def row_command(session: Session) -> tuple[list[str], str]:
  """The row's `lra run` arguments (quick: shrunk) and its task."""
  from lra import ledger
  args = ledger.run_args(session.row)
  if session.args.quick:
    args += [f"--config.{o}" for o in QUICK_OVERRIDES]
  return args, args[1]


class DataMaker(threading.Thread):
  """The row's prepared data under .rows/data/, made on the host's cores unless already there."""

  def __init__(self, session: Session, task: str):
    super().__init__(daemon=True)
    self.session, self.task = session, task
    self.status, self.seconds = None, None
    self.parts: dict[str, float] = {}  # each command's seconds and the workers: where time went

  def run(self) -> None:
    began = time.monotonic()
    s, recipe = self.session, DATA[self.task]
    cache = s.data_dir / recipe["cache"]
    if (cache / "meta.json").exists():
      self.status, self.seconds = "ready (made by an earlier call)", 0.0
      return
    raw = s.work / f"{self.task}_raw"
    shutil.rmtree(raw, ignore_errors=True)
    # Leave two cores: one compiles (or probes) on the accelerator, one feeds it.
    workers = max(1, (os.cpu_count() or 3) - 2)
    self.parts["workers"] = workers
    generate = QUICK_DATA[self.task] if s.args.quick else recipe["generate"]
    for cmd in (lra("data", "generate", self.task, "--out", str(raw), "--workers", str(workers),
                    *generate),
                lra("data", "prepare", self.task, "--source", str(raw), "--data-dir",
                    str(s.data_dir))):
      started = time.monotonic()
      code = s.child(cmd, "data.log").wait()
      self.parts[f"{cmd[4]}_s"] = round(time.monotonic() - started, 1)
      if code != 0:
        self.status = f"`{shlex.join(cmd[3:6])}` failed (see .rows/data.log)"
        break
    else:
      self.status = "ready"
      shutil.rmtree(raw, ignore_errors=True)
    self.seconds = time.monotonic() - began


def place_state(session: Session) -> dict[str, Any]:
  """The row's newest state in .rows/results: a newer one left by an earlier call stays,
  else the committed archive is unpacked, else the row starts."""
  from lra import ledger, pack, writers
  row, args = session.row, session.args
  here = session.results / row["run"]
  committed = ledger.archive(row, args.results_dir)
  mine = ledger.final(row, session.results) if here.exists() else None
  theirs = pack.read_manifest(committed) if pack.parts_of(committed, existing_only=True) else None
  if mine and (theirs is None or (mine.get("step") or 0) >= (theirs.get("step") or 0)):
    return {"from": f"{writers.portable(str(here))} (an earlier call's)", "step": mine.get("step")}
  shutil.rmtree(here, ignore_errors=True)
  if theirs is None:
    return {"from": "nothing: the row starts", "step": 0}
  target, manifest = pack.unpack(committed, session.results)
  return {"from": str(committed.relative_to(args.results_dir.parent)
                      if committed.is_relative_to(args.results_dir.parent) else committed),
          "step": manifest["step"]}


def warm_up(row_args: list[str], spec: dict[str, Any]) -> None:
  """Compiles the row's train and eval steps as `lra run` will (train.check_fits), filling the
  persistent compilation cache that the run then reads (child process; no data needed)."""
  from lra import cli, train
  from lra.tasks.contract.spec import TaskSpec
  config = cli.run_config(row_args)
  spec = TaskSpec(**spec)
  s = train.setup(config, spec)
  train.check_fits(config, s, train.init_state(s, spec, config.train.seed), spec)


def metrics_summary(run_dir: Path, after: int) -> dict[str, Any]:
  """This call's training: steps/s (median of its log windows after the first), best so far."""
  from lra.writers import read_metrics
  rows = read_metrics(run_dir / "metrics.jsonl") if (run_dir / "metrics.jsonl").exists() else []
  rates = [r["train/steps_per_s"] for r in rows if r["step"] > after and "train/steps_per_s" in r]
  final = json.loads((run_dir / "final.json").read_text()) if (run_dir / "final.json").exists() \
      else {}
  return {"steps_per_s": statistics.median(rates[1:]) if len(rates) > 1 else (
              rates[0] if rates else None),
          "step": final.get("step"), "num_steps": final.get("num_steps"),
          "status": final.get("status"), "best_step": final.get("best_step"),
          "val_accuracy": final.get("val_accuracy"), "test_accuracy": final.get("test_accuracy"),
          "best_test_accuracy": final.get("best_test_accuracy"),
          "stop_reason": final.get("stop_reason"), "device": final.get("device"),
          "jax": (final.get("versions") or {}).get("jax")}


def advance(session: Session) -> None:
  """The whole call: data and compile (or probe), state, training, pack, report."""
  from lra import ledger
  row, report = session.row, session.report
  if row is None:
    report["status"] = "every ledger row is complete: nothing to run"
    return
  args, task = row_command(session)
  spec = QUICK_SPEC[task] if session.args.quick else row["spec"]
  report.update(row=row["id"], row_command=row["command"], run=row["run"])
  session.log(f"row {row['id']}: {row['command']}")
  data = DataMaker(session, task)
  data.start()
  began = time.monotonic()
  if session.args.probe:  # the probe on the accelerator while the host makes the data
    probe = session.child([sys.executable, str(REPO / "tools" / "step_probe.py"), "--out",
                           str(session.out), "--budget-s", str(session.args.probe_budget_s),
                           *(["--quick"] if session.args.quick else [])], "probe.log")
    code = probe.wait()
    report["phases"]["probe"] = {"seconds": round(time.monotonic() - began, 1),
                                 "exit_code": code, "report": "step_probe.md"}
    session.log(f"probe: exit {code}")
  warm = session.child([sys.executable, str(Path(__file__).resolve()), "--warm-up",
                        json.dumps({"args": args, "spec": spec})], "warm_up.log")
  state = place_state(session)
  report["phases"]["state"] = state
  session.log(f"state: {state['from']} (step {state['step']})")
  code = warm.wait()
  report["phases"]["compile"] = {"seconds": round(time.monotonic() - began, 1),
                                 "exit_code": code}
  data.join()
  report["phases"]["data"] = {"status": data.status, "seconds": round(data.seconds or 0, 1),
                              **data.parts}
  session.log(f"data: {data.status} ({data.seconds or 0:.0f} s); compile: exit {code}")
  session.write()
  if data.status is None or not data.status.startswith("ready"):
    report["status"] = f"no data: {data.status}"
    return
  run_dir = session.results / row["run"]
  stop_after = session.left() - PACK_RESERVE_S
  if stop_after < 30:
    report["status"] = f"out of time before training ({session.left():.0f} s left)"
    return
  cmd = lra(*args, "--data-dir", str(session.data_dir), "--run-dir", str(run_dir), "--quiet",
            "--stop-after", f"{stop_after:.0f}")
  began = time.monotonic()
  code = session.child(cmd, "run.log").wait()
  summary = metrics_summary(run_dir, state["step"] or 0)
  report["phases"]["run"] = {"seconds": round(time.monotonic() - began, 1), "exit_code": code,
                             "command": shlex.join(["lra", *cmd[3:]]).replace(
                                 str(session.work), ".rows")}
  report.update(step_before=state["step"], **summary)
  session.log(f"run: exit {code}, step {state['step']} -> {summary['step']}")
  if code not in (0, 130):
    report["status"] = f"the run failed (exit {code}; see .rows/run.log)"
    report["run_log_tail"] = (session.work / "run.log").read_text()[-2000:]
    return
  from lra import pack
  began = time.monotonic()
  name = "-".join(row["run"].split("/")[1:]) + ".pack"  # letters, digits, '.', '_', '-'
  written = pack.pack(run_dir, session.out / _safe(name))
  report["phases"]["pack"] = {"seconds": round(time.monotonic() - began, 1)}
  report["archive"] = [{"file": p.name, "bytes": p.stat().st_size} for p in written]
  report["status"] = (f"{summary['status']} at step {summary['step']:,} of "
                      f"{summary['num_steps']:,}")
  report["next"] = (f"python tools/accelerator_rows.py --adopt OUT; then commit "
                    f"{ledger.LEDGER.parent / row['run']}/ (run.pack*, config.json, "
                    "final.json, metrics.jsonl) and the tables (lra table --committed)")


def _safe(name: str) -> str:
  return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


# ---------------------------------------------------------------------------------------------
# Back on the session's machine.

def adopt(out: Path, results_dir: Path) -> list[Path]:
  """Moves OUT's archive into its row's run folder as run.pack (or its parts), replacing the old
  one, and copies the run files beside it; returns what changed."""
  from lra import ledger, pack
  report = json.loads((out / "rows.json").read_text())
  if not report.get("archive"):
    raise ValueError(f"{out / 'rows.json'}: this call packed no archive ({report.get('status')})")
  first = out / report["archive"][0]["file"]
  manifest = pack.read_manifest(first)
  target = results_dir / manifest["run"]
  changed = []
  with tempfile.TemporaryDirectory(prefix=".adopt-", dir=results_dir) as scratch:
    pack.unpack(first, Path(scratch))  # checks every file before anything moves
    for name in pack.RUN_FILES:
      source = Path(scratch) / manifest["run"] / name
      if source.exists():
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target / name)
        changed.append(target / name)
  for old in pack.parts_of(target / ledger.ARCHIVE, existing_only=True):
    old.unlink()
  for index, part in enumerate(pack.parts_of(first)):
    suffix = part.name[len(first.name.split(".pack")[0] + ".pack"):]
    shutil.copyfile(part, target / (ledger.ARCHIVE + suffix))
    changed.append(target / (ledger.ARCHIVE + suffix))
  return changed


# ---------------------------------------------------------------------------------------------
# Report.

def render(report: dict[str, Any]) -> str:
  def pct(x):
    return "-" if x is None else f"{100 * x:.2f}%"
  lines = ["# Paper rows on a lent GPU", ""]
  if report.get("quick"):
    lines += ["**A `--quick` run**: tiny sizes that show the report's format.", ""]
  lines += [f"`{report['command']}`: budget {report['budget_s']:.0f} s, used "
            f"{report.get('wall_s', 0):.0f} s. Status: {report.get('status', 'running')}.", ""]
  if report.get("row"):
    lines += [f"- Row: {report['row']}: `{report['row_command']}` ({report['run']}), on "
              f"{report.get('device')} with JAX {report.get('jax')}",
              f"- Steps: {report.get('step_before')} -> {report.get('step')} of "
              f"{report.get('num_steps')}; {report.get('steps_per_s') or 0:.1f} steps/s "
              "(median of this call's log windows after the first)",
              f"- Best so far: {pct(report.get('test_accuracy'))} test at the best val step "
              f"{report.get('best_step')} (val {pct(report.get('val_accuracy'))}); best test "
              f"{pct(report.get('best_test_accuracy'))}"]
    for name, phase in report.get("phases", {}).items():
      lines.append(f"- {name}: " + ", ".join(f"{k} {v}" for k, v in phase.items()))
    for entry in report.get("archive", []):
      lines.append(f"- Archive: {entry['file']} ({entry['bytes'] / 2**20:.1f} MiB)")
    if report.get("next"):
      lines += ["", f"Next: {report['next']}"]
  return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", type=Path, help="where the archive and rows.md|json go")
  parser.add_argument("--budget-s", type=float, default=420, help="wall time of the whole call")
  parser.add_argument("--probe", action="store_true", help="run tools/step_probe.py first")
  parser.add_argument("--probe-budget-s", type=float, default=240)
  parser.add_argument("--quick", action="store_true", help="tiny sizes, for a CPU")
  parser.add_argument("--results-dir", type=Path, default=REPO / "results",
                      help="the committed results: the ledger and the rows' archives")
  parser.add_argument("--work", type=Path, default=REPO / ".rows",
                      help="working folder (kept between calls to a warm machine)")
  parser.add_argument("--adopt", type=Path, metavar="OUT", help="put OUT's archive and run files "
                      "in their row's run folder under --results-dir")
  parser.add_argument("--warm-up", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  args.argv = list(sys.argv[1:] if argv is None else argv)
  if not (args.adopt or args.warm_up or args.out):
    parser.error("--out OUT is needed (or --adopt OUT)")
  return args


def main(argv: list[str] | None = None) -> int:
  args = parse_args(argv)
  if args.warm_up:
    warm = json.loads(args.warm_up)
    warm_up(warm["args"], warm["spec"])
    return 0
  if args.adopt:
    for path in adopt(args.adopt, args.results_dir):
      print(f"wrote {path}")
    return 0
  session = Session(args)
  try:
    advance(session)
  finally:
    session.write()
  print(render(session.report))
  return 0 if "archive" in session.report or session.row is None else 1


if __name__ == "__main__":
  sys.exit(main())
