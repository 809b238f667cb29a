"""The runs of the `squares` table: every mixer on Pathfinder's easy set as 4x4 pixel squares.

Each is an ordinary `lra run pathfinder MIXER --preset squares --seed N` in its default folder
(results/runs/pathfinder/MIXER/squares_seedN/), so `lra table` reads it like any other run. The
preset is NOT LRA's Pathfinder (64 tokens, not 1,024 pixels); why it exists and how it was chosen:
docs/protocol.md ("Pathfinder on squares").

  python tools/squares_table.py list [--todo]               # the runs, and where each stands
  python tools/squares_table.py run NAME [--core C] [--stop-after S]   # one run, or resume it
  python tools/squares_table.py work --core C --stop-after S [NAME ...]  # unfinished runs in turn
  python tools/squares_table.py pack                         # archive every stopped run

A run longer than a sitting stops sealed (`--stop-after`) and travels as its archive
(`run.pack`, committed beside its files); `run` unpacks it on a machine without its checkpoints,
as tools/pathfinder_study.py does (`--core`: one core, one XLA thread).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from pathfinder_study import ROOT, run_pinned

from lra.runs import pack
from lra.models.mixers import MIXERS

OUT = ROOT / "results" / "runs" / "pathfinder"
# The order runs are taken in: the mixers a reader looks for first, then the rest of the
# registry, then the published blocks, then the seeds that show the spread.
FIRST = ("latte", "softmax", "s5")
PUBLISHED = ("s5", "mega")
SEEDED = ("latte", "softmax", "s5")
# Then the fast mixers at chance on seed 0 that still fit the screen (docs/protocol.md: the ones
# another seed would test first), Performer and Linformer first (~10 minutes a run on one core).
SEEDED_NEXT = ("performer", "linformer", "reformer")


@dataclasses.dataclass(frozen=True)
class TableRun:
  mixer: str
  preset: str = "squares"
  seed: int = 0

  @property
  def name(self) -> str:
    return f"{self.mixer}/{self.preset}_seed{self.seed}"

  @property
  def folder(self) -> Path:
    return OUT / self.mixer / f"{self.preset}_seed{self.seed}"

  def command(self) -> list[str]:
    return ["lra", "run", "pathfinder", self.mixer, "--preset", self.preset, "--seed",
            str(self.seed), "--run-dir", str(self.folder.relative_to(ROOT)), "--quiet"]

  def status(self) -> str:
    final = self.folder / "final.json"
    if not final.exists():
      return "not started"
    record = json.loads(final.read_text())
    return (f"{record.get('status')} at step {record.get('step', 0):,} of "
            f"{record.get('num_steps', '?'):,}")


def table_runs() -> list[TableRun]:
  mixers = [*FIRST, *sorted(m for m in MIXERS if m not in FIRST)]
  return ([TableRun(m) for m in mixers] + [TableRun(m, "squares_published") for m in PUBLISHED]
          + [TableRun(m, seed=seed) for group in (SEEDED, SEEDED_NEXT) for seed in (1, 2)
             for m in group])


def _unfinished(runs: list[TableRun]) -> list[TableRun]:
  return [r for r in runs if not r.status().startswith("complete")]


def work(runs: list[TableRun], core: int | None, stop_after: float) -> int:
  """Trains unfinished runs in turn until `stop_after` seconds have passed; a run whose folder
  another worker holds (its lock) is left to it."""
  deadline = time.monotonic() + stop_after
  for run in _unfinished(runs):
    left = deadline - time.monotonic()
    if left < 120:  # under two minutes buys a compile and a checkpoint, not training
      break
    # Another worker may have finished this run, or holds it now, since the list was made.
    if (run.folder / "lock").exists() or run.status().startswith("complete"):
      continue
    code = run_pinned(run.folder, run.command(), core, left)
    if code not in (0, 130):  # 130: stopped sealed (--stop-after); the same command resumes
      print(f"{run.name}: lra run exited {code}", flush=True)
  return 0


def pack_stopped(runs: list[TableRun]) -> None:
  for run in runs:
    if run.folder.exists() and not run.status().startswith("complete") and any(
        (run.folder / "checkpoints").glob("*")):
      pack.pack(run.folder, run.folder / "run.pack")
      print(f"packed {run.name}: {run.status()}")


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  sub = parser.add_subparsers(dest="command", required=True)
  listing = sub.add_parser("list")
  listing.add_argument("--todo", action="store_true", help="only the unfinished runs")
  one = sub.add_parser("run")
  one.add_argument("name", choices=[r.name for r in table_runs()])
  worker = sub.add_parser("work")
  worker.add_argument("names", nargs="*", help="these runs, in this order (default: all)")
  for p in (one, worker):
    p.add_argument("--core", type=int, help="pin to this core, one XLA thread")
    p.add_argument("--stop-after", type=float, metavar="SECONDS", required=p is worker,
                   help="stop sealed within SECONDS; the same command resumes")
  sub.add_parser("pack")
  args = parser.parse_args(argv)
  runs = table_runs()
  if args.command == "list":
    for run in (_unfinished(runs) if args.todo else runs):
      print(f"{run.name:36} {run.status()}")
    return 0
  if args.command == "run":
    run = next(r for r in runs if r.name == args.name)
    return run_pinned(run.folder, run.command(), args.core, args.stop_after)
  if args.command == "work":
    chosen = [next(r for r in runs if r.name == n) for n in args.names] if args.names else runs
    return work(chosen, args.core, args.stop_after)
  pack_stopped(runs)
  return 0


if __name__ == "__main__":
  sys.exit(main())
