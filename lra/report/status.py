"""`lra status`: the task x mixer grid of each preset, one cell per (task, mixer, preset): complete
(its score), unfinished (the share of its steps), stopped (diverged or failed) or not run (-),
for your runs first, then the repository's committed ones (their own rows, under a heading),
with the accelerator cost of each row the ledger of paper rows (results/ledger.json) lists as a
note under its grid. About 100 columns wide: the LRA tasks' grid is the widest.

Read from final.json only (every run writes one when it starts), so a status costs no JAX.
"""
from __future__ import annotations

import dataclasses
import textwrap
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lra import errors
from lra.report import ledger, results, run_summary
from lra.report.table_rules import COMMITTED, LRA_TASKS, YOURS, TASK_TITLES, decimals
from lra.report.tables import load_published

# The grid that is always shown, run or not: the papers' protocol on the LRA tasks.
ALWAYS = "paper"
NOT_RUN = "-"
WIDTH = 100  # the intro's lines; the grids fit it unless a variant's name is long


def ledger_costs(path: Path | None) -> dict[tuple[str, str, str], str]:
  """The accelerator cost of each row of the ledger of paper rows (results/ledger.json), keyed by
  the cell it fills: {(task, mixer, preset): text}; {} without a ledger (no costs shown)."""
  if path is None or not path.is_file():
    return {}
  return ledger.cell_costs(ledger.load(path))


def default_ledger() -> Path | None:
  committed = results.committed_results_dir()
  return committed / ledger.LEDGER.name if committed else None


def _finals(results_dir: Path | None) -> list[dict[str, Any]]:
  """The folder's runs as records, each with its folder (`path`)."""
  if results_dir is None:
    return []
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", results.RunFileWarning)  # `lra table --check` names them
    runs = results.load_runs(results_dir)
  return [dict(r, path=Path(results_dir).parent / r["run_dir"])
          for r in runs.drop(columns=["config"]).to_dict("records")]


def cell(runs: Sequence[Mapping[str, Any]]) -> str:
  """One grid cell from the runs of one (task, mixer, preset) in one folder.

  Complete runs give their mean test accuracy at the best val step (n = seeds when more than
  one); else the most advanced unfinished run's share of its steps ("30%": a paper row's step a/b
  would not fit the grid's columns; where no process runs it, run_summary.stopped, the grid's note
  gives its step and what resumes it); else how the last ended ("diverged at 300"); else NOT_RUN.
  """
  complete = [r for r in runs if r["status"] == "complete"]
  scores = [s for s in (run_summary.number(r["test_accuracy"]) for r in complete)
            if s is not None]
  if scores:
    text = decimals(100 * sum(scores) / len(scores))
    return text + (f" (n={len(scores)})" if len(scores) > 1 else "")
  going = [r for r in runs if r["status"] in ("running", "interrupted")]
  if going:
    best = max(going, key=lambda r: run_summary.number(r["step"]) or 0)
    step, total = (run_summary.number(best.get(k)) for k in ("step", "num_steps"))
    return f"{100 * (step or 0) / total:.0f}%" if total else run_summary.progress(best)
  if runs:
    last = max(runs, key=lambda r: run_summary.number(r["step"]) or 0)
    return f"{last['status']} at {int(run_summary.number(last['step']) or 0):,}"
  return NOT_RUN


def _resume(run: Mapping[str, Any]) -> str:
  """What resumes a stopped run: its command, or for a run carried as an archive with no
  checkpoint beside it (a paper row between GPU machines) unpacking it first, where `lra unpack`
  puts it by default."""
  from lra.runs import pack  # pylint: disable=import-outside-toplevel (JAX: only when needed)
  if not run.get("path"):
    return ""
  path = Path(run["path"])
  archive = path / "run.pack"
  if (path / "checkpoints").is_dir() or not pack.parts_of(archive, existing_only=True):
    return run_summary.resume_text(path)
  unpacked = Path("results/local/runs") / path.relative_to(path.parents[2])
  return (f"carried as {run_summary.from_here(archive)}: `lra unpack "
          f"{run_summary.from_here(archive)}`, then "
          f"{run_summary.resume_text(path, unpacked) or 'its command resumes it'}")


def _variant(run: Mapping[str, Any]) -> str:
  """What sets a run apart from its preset's plain runs ("" for none): the departures its folder
  name lists, each key without its section (`+model.num_layers=4` as `+num_layers=4`,
  `+mixers.latte.vapor=True` as `+vapor=True` on latte's row: the row names it), or a folder
  named by hand (`[reference]`). Runs of different variants are different experiments, never one
  cell's mean."""
  variant, preset = str(run.get("variant") or ""), str(run["preset"])
  if variant == preset:
    return ""
  if not variant.startswith(preset + "+"):
    return f"[{variant}]"

  def short(departure: str) -> str:
    key = departure.split(".", 1)[-1]  # model., data., mixers., ...: kept narrow
    return key.removeprefix(f"{run['mixer']}.")
  return "+" + ",".join(map(short, variant[len(preset) + 1:].split(",")))


@dataclasses.dataclass
class Grid:
  """One preset's grid: a header (mixer, then one column per task), your rows, the committed
  runs' rows, and the notes its cells' [k] marks refer to."""
  header: list[str]
  yours: list[list[str]]
  committed: list[list[str]]
  notes: list[str]


def grid(yours: Iterable[Mapping[str, Any]], committed: Iterable[Mapping[str, Any]],
         presets: Sequence[str] | None = None, mixers: Sequence[str] = (),
         costs: Mapping[tuple[str, str, str], str] | None = None) -> dict[str, Grid]:
  """{preset: Grid}.

  A row is one mixer (with its variant, see _variant) in one folder: yours, or the committed
  runs. Your rows come first, those with a run before the placeholders: a mixer of `mixers` with
  no run at all gets one row of NOT_RUN among yours.

  Args:
    yours, committed: final.json records (results.load_runs rows) of each folder.
    presets: the grids to show (default: `paper`, then every preset with a run).
    mixers: the mixers every `paper` grid lists, run or not, in this order (then the others).
    costs: ledger_costs; a cell they name gets a mark [k], and the grid the note "[k] ...".
  """
  runs = [dict(r, source=YOURS) for r in yours] + [dict(r, source=COMMITTED) for r in committed]
  if presets is None:
    presets = [ALWAYS] + sorted({r["preset"] for r in runs} - {ALWAYS})
  order = {m: i for i, m in enumerate(mixers)}
  tables = {}
  for preset in presets:
    mine = [r for r in runs if r["preset"] == preset]
    tasks = sorted({r["task"] for r in mine} | set(LRA_TASKS if preset == ALWAYS else ()),
                   key=lambda t: (LRA_TASKS.index(t) if t in LRA_TASKS else len(LRA_TASKS), t))
    keys = {(r["mixer"], _variant(r), r["source"]) for r in mine}
    keys |= {(m, "", YOURS) for m in (mixers if preset == ALWAYS else ())
             if not any(k[0] == m for k in keys)}
    table = Grid(["mixer", *(TASK_TITLES.get(t, t) for t in tasks)], [], [], [])
    for mixer, variant, source in sorted(keys, key=lambda k: (
        order.get(k[0], len(order)), k[0], k[1])):
      row = [mixer + (f" {variant}" if variant else "")]
      for task in tasks:
        text = cell([r for r in mine if (r["mixer"], _variant(r), r["source"], r["task"]) ==
                     (mixer, variant, source, task)])
        cost = None if variant else (costs or {}).get((task, mixer, preset))
        note = f"{TASK_TITLES.get(task, task)}, {mixer}: {cost}" if cost else None
        unfinished = [r for r in mine if (r["mixer"], _variant(r), r["source"], r["task"]) ==
                      (mixer, variant, source, task) and r["status"] in ("running", "interrupted")]
        halted = max(unfinished, key=lambda r: run_summary.number(r["step"]) or 0, default=None)
        if text.endswith("%") and run_summary.stopped(halted, halted.get("path")):
          resume = _resume(halted)
          note = (f"{TASK_TITLES.get(task, task)}, {mixer}: stopped at "
                  f"{run_summary.progress(halted)}; {resume}") if resume else note
        row.append((text, note))
      (table.yours if source == YOURS else table.committed).append(row)
    table.yours.sort(key=lambda row: all(text == NOT_RUN for text, _ in row[1:]))
    # Notes numbered as the rows are read: yours, then the committed runs.
    marks: dict[str, int] = {}
    for rows in (table.yours, table.committed):
      for row in rows:
        for i, (text, note) in enumerate(row[1:], start=1):
          if note:
            marks.setdefault(note, len(marks) + 1)
          row[i] = text + (f" [{marks[note]}]" if note else "")
    table.notes = [textwrap.fill(f"[{k}] {note}", WIDTH, subsequent_indent="    ",
                                 break_on_hyphens=False, break_long_words=False)
                   for note, k in marks.items()]
    tables[preset] = table
  return tables


def render(tables: Mapping[str, Grid]) -> str:
  """The grids as aligned plain text, one block per preset: yours, then the committed runs
  under a heading of their own (yours get one too beside them), then the grid's notes."""
  blocks = []
  for preset, table in tables.items():
    rows = [table.header, *table.yours, *table.committed]
    if len(rows) == 1:
      blocks.append(f"preset {preset}: no runs yet")
      continue
    widths = [max(len(row[i]) for row in rows) for i in range(len(table.header))]

    def line(row: list[str]) -> str:
      return "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
    lines = [f"preset {preset}", line(table.header)]
    lines += (["yours:"] if table.yours and table.committed else []) + [
        line(row) for row in table.yours]
    lines += (["committed (the repository's runs):"] if table.committed else []) + [
        line(row) for row in table.committed]
    lines += table.notes
    blocks.append("\n".join(lines))
  return "\n\n".join(blocks)


def registered_mixers() -> list[str]:
  """The suite's mixers (one config block each), in the published tables' order."""
  from lra.configs.common import mixer_configs  # the names, without importing JAX and the mixers
  order = [row["mixer"] for row in load_published()]
  return sorted(mixer_configs(), key=lambda m: (order.index(m) if m in order else len(order), m))


def main(results_dir: Path, committed: Path | None, presets: Sequence[str] | None,
         ledger_path: Path | None) -> int:
  """The `lra status` subcommand (flags in lra/cli/status.py): prints the grids."""
  from lra.configs.common import CPU_PRESETS, PRESETS, PUBLISHED_PRESETS
  known = PRESETS + CPU_PRESETS + PUBLISHED_PRESETS
  unknown = [p for p in presets or () if p not in known]
  if unknown:
    raise errors.BadValue(f"lra status --presets: unknown {', '.join(unknown)}; valid presets: "
                          f"{', '.join(known)}")
  yours = _finals(results_dir)
  theirs = _finals(committed)
  costs = ledger_costs(ledger_path)
  intro = (f"lra status: your runs in {Path(results_dir).resolve() / 'runs'}/"
           + (f", then the repository's committed runs in {committed / 'runs'}/"
              if committed else "")
           + ". Cells: test accuracy (%) at the best val step, mean over seeds (n); p% = "
           "unfinished, p% of its steps done (a note [k] when no process runs it: its step and "
           f"what resumes it); diverged or failed at its last step; {NOT_RUN} = not run."
           + (f" [k] = a paper row's accelerator cost, under its grid ({ledger_path})."
              if costs else ""))
  print(textwrap.fill(intro, WIDTH, break_on_hyphens=False, break_long_words=False))
  print()
  print(render(grid(yours, theirs, presets, registered_mixers(), costs)))
  return 0
