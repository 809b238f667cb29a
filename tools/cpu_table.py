"""The runs of the CPU tables: every mixer on Pathfinder's easy set as 4x4 pixel squares, from
scratch and with self-pretraining (SPT), and the SPT rows of ListOps and of LRA's own Pathfinder.

Each is an ordinary `lra run TASK MIXER --preset P --seed N` (an SPT row: `lra pretrain`, then
`lra run ... --init-from` its folder) in its default folder (results/runs/TASK/MIXER/NAME/), so
`lra table` reads it like any other run. The `squares` preset is NOT LRA's Pathfinder (64 tokens,
not 1,024 pixels); why it exists and how it was chosen: docs/presets_cpu.md ("Pathfinder on
squares"); the SPT runs and their pilot: results/spt/README.md.

  python tools/cpu_table.py list [--todo] [--group G]          # the runs, and where each stands
  python tools/cpu_table.py run NAME [--core C] [--stop-after S]   # one run, or resume it
  python tools/cpu_table.py work --core C --stop-after S [--group G] [NAME ...]  # in turn
  python tools/cpu_table.py pack                               # archive every stopped run

The tables and curves results/spt/README.md shows of these runs: tools/spt_summary.py.

A run longer than a sitting stops sealed (`--stop-after`) and travels as its archive (`run.pack`,
committed beside its files); `run` unpacks it on a machine without its checkpoints, as
tools/pathfinder_study.py does (`--core`: one core, one XLA thread). A fine-tune waits for its
pretraining run; a complete pretraining run keeps its pack until its fine-tune is complete (the
fine-tune loads its best checkpoint from it).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from pathfinder_study import ROOT, run_pinned

from lra.models.mixers import MIXERS
from lra.runs import pack, run_lock

RUNS = ROOT / "results" / "runs"
# The order runs are taken in: the mixers a reader looks for first, then the rest of the
# registry, then the published blocks, then the seeds that show the spread.
FIRST = ("latte", "softmax", "s5")
PUBLISHED = ("s5", "mega")
SEEDED = ("latte", "softmax", "s5")
# Then the fast mixers at chance on seed 0 that still fit the screen (results/squares/README.md:
# the ones another seed would test first), Performer and Linformer first (~10 minutes a run on one
# core).
SEEDED_NEXT = ("performer", "linformer", "reformer")
PHASES = ("", "pretrain", "spt")  # from scratch; self-pretraining; its fine-tune
LONGER_PRETRAINING = 24_000  # steps: the pilot's one longer pretraining (3x compute-matched)


@dataclasses.dataclass(frozen=True)
class TableRun:
  mixer: str
  preset: str = "squares"
  seed: int = 0
  phase: str = ""
  task: str = "pathfinder"
  group: str = "squares"  # which list of results/spt/README.md it belongs to (`--group`)
  pretrain_steps: int | None = None  # an SPT pair's longer pretraining (the preset's: None)
  committed_as: str = ""  # a committed run's name when not the preset's (spt_summary.SCRATCH_AS)

  @property
  def variant(self) -> str:
    """The name `lra` gives the run (run_identity.run_name): a longer pretraining departs in its
    train.num_steps, and its fine-tune is named for that start."""
    if self.committed_as:
      return self.committed_as
    longer = {"pretrain": f",train.num_steps={self.pretrain_steps}",
              "spt": f",pretrain.train.num_steps={self.pretrain_steps}"}
    return self.preset + (f"+{self.phase}" if self.phase else "") + (
        longer[self.phase] if self.pretrain_steps else "")

  @property
  def name(self) -> str:
    where = "" if self.task == "pathfinder" else f"{self.task}/"
    return f"{where}{self.mixer}/{self.variant}_seed{self.seed}"

  @property
  def folder(self) -> Path:
    return RUNS / self.task / self.mixer / f"{self.variant}_seed{self.seed}"

  @property
  def pretraining(self) -> TableRun | None:
    """The pretraining run a fine-tune starts from (for a run committed under another name,
    the pretraining committed beside it)."""
    if self.phase != "spt":
      return None
    pretraining = dataclasses.replace(self, phase="pretrain", committed_as="")
    return before_s5_mend(pretraining) if self.committed_as else pretraining

  def command(self) -> list[str]:
    verb = "pretrain" if self.phase == "pretrain" else "run"
    start = (["--init-from", str(self.pretraining.folder.relative_to(ROOT))]
             if self.pretraining else [])
    # The pretraining's budget is the pretraining's setting alone (a fine-tune refuses it): the
    # fine-tune's config.json records its start, and its name says it.
    longer = ([f"--config.spt.pretrain_steps={self.pretrain_steps}"]
              if self.pretrain_steps and self.phase == "pretrain" else [])
    return ["lra", verb, self.task, self.mixer, "--preset", self.preset, "--seed",
            str(self.seed), "--run-dir", str(self.folder.relative_to(ROOT)), *start, *longer,
            "--quiet"]

  def record(self) -> dict:
    final = self.folder / "final.json"
    return json.loads(final.read_text()) if final.exists() else {}

  def complete(self) -> bool:
    return self.record().get("status") == "complete"

  def status(self) -> str:
    record = self.record()
    if not record:
      return "not started"
    return (f"{record.get('status')} at step {record.get('step', 0):,} of "
            f"{record.get('num_steps', '?'):,}")

  def ready(self) -> bool:
    """Whether it can train now: a fine-tune needs its pretraining complete."""
    return self.pretraining is None or self.pretraining.complete()


# S5's own-block runs made before its rates and dropout masks became S5's own (issue 78), kept
# under the names of their departures (model.s5_dropout=elementwise, train.schedule=cosine; a
# name over 80 characters is its hash): the SPT pilot and the ListOps pairs compared these.
_OLD = ",model.s5_dropout=elementwise,train.schedule=cosine"
BEFORE_S5_MEND = {
    ("pathfinder", "", None): "squares_published+" + _OLD[1:],
    ("pathfinder", "pretrain", None): "squares_published+pretrain" + _OLD,
    ("pathfinder", "spt", None): "squares_published+spt" + _OLD,
    ("pathfinder", "pretrain", LONGER_PRETRAINING):
        "squares_published+pretrain,model.s5_dropout=elementwise,train.num_steps=24000,"
        "train.schedule=cosine",
    ("pathfinder", "spt", LONGER_PRETRAINING): "squares_published+spt,cfg-05d37efb",
    ("listops", "pretrain", None): "laptop_published+pretrain" + _OLD,
    ("listops", "spt", None): "laptop_published+spt" + _OLD,
}


def before_s5_mend(run: TableRun) -> TableRun:
  """The run as committed before the mend, where it is S5's own block."""
  name = BEFORE_S5_MEND.get((run.task, run.phase, run.pretrain_steps))
  own = run.mixer == "s5" and run.preset.endswith("_published")
  return dataclasses.replace(run, committed_as=name) if own and name else run


def spt_pair(mixer: str, preset: str = "squares", seed: int = 0, task: str = "pathfinder",
             group: str = "spt", pretrain_steps: int | None = None) -> list[TableRun]:
  return [TableRun(mixer, preset, seed, phase, task, group, pretrain_steps)
          for phase in ("pretrain", "spt")]


def table_runs() -> list[TableRun]:
  mixers = [*FIRST, *sorted(m for m in MIXERS if m not in FIRST)]
  scratch = ([TableRun(m) for m in mixers] + [TableRun(m, "squares_published") for m in PUBLISHED]
             + [TableRun(m, seed=seed) for group in (SEEDED, SEEDED_NEXT) for seed in (1, 2)
                for m in group])
  # The SPT pilot first (results/spt/README.md): two seeds of the four blocks it compares.
  pilot = [run for seed in (0, 1) for mixer, preset in (
      ("latte", "squares"), ("softmax", "squares"), ("s5", "squares"), ("s5", "squares_published"))
           for run in spt_pair(mixer, preset, seed, group="pilot")]
  # Where compute-matched SPT did not help (S5, both blocks, seed 0), the one try of a
  # longer pretraining: 3x the compute-matched 8,000 steps (4.8 epochs; the SPT code's 50 epochs
  # of Pathfinder would be 250,000), on S5's own block, the published Pathfinder leader.
  pilot += spt_pair("s5", "squares_published", 0, group="pilot", pretrain_steps=LONGER_PRETRAINING)
  # Its own block's second seed from scratch, which the pilot compares seed 1 against.
  pilot.append(TableRun("s5", "squares_published", 1, group="pilot"))
  pilot = [before_s5_mend(run) for run in pilot]
  column = [run for mixer in mixers for run in spt_pair(mixer)]
  column += [run for mixer in PUBLISHED for run in spt_pair(mixer, "squares_published")]
  # Linformer last: the fourth seeded mixer is the third cut, the other three never cut.
  seeds = [run for mixer in ("latte", "softmax", "s5", "linformer") for seed in (1, 2)
           for run in spt_pair(mixer, seed=seed)]
  listops = [before_s5_mend(run) for mixer, preset in (
      ("latte", "laptop"), ("softmax", "laptop"), ("s5", "laptop_published"), ("s5", "laptop"))
             for run in spt_pair(mixer, preset, task="listops", group="listops")]
  # LRA's own Pathfinder (1,024 pixel tokens): Latte alone, the plan's first cut
  # (results/spt/README.md).
  pixels = spt_pair("latte", "laptop", group="pixels")
  found, unique = set(), []
  for run in scratch + pilot + column + seeds + listops + pixels:
    if run.folder not in found:  # the pilot's seed 0 is the column's
      found.add(run.folder)
      unique.append(run)
  return unique


def _unfinished(runs: list[TableRun]) -> list[TableRun]:
  return [r for r in runs if not r.complete()]


def _held(folder: Path) -> bool:
  """Whether a live `lra run` holds the folder (a killed worker's stale lock does not count)."""
  return run_lock.RunDirLock(folder, take=False).held()


def work(runs: list[TableRun], core: int | None, stop_after: float) -> int:
  """Trains unfinished runs in turn until `stop_after` seconds have passed; a run another worker
  holds (a live lock), or a fine-tune whose pretraining is not complete, is passed over."""
  deadline = time.monotonic() + stop_after
  for run in _unfinished(runs):
    left = deadline - time.monotonic()
    if left < 120:  # under two minutes buys a compile and a checkpoint, not training
      break
    # Another worker may have finished this run, or holds it now, since the list was made.
    if _held(run.folder) or run.complete() or not run.ready():
      continue
    if run.pretraining is not None:
      _unpack(run.pretraining.folder)  # its best checkpoint, from its pack on a fresh machine
    code = run_pinned(run.folder, run.command(), core, left)
    if code not in (0, 130):  # 130: stopped sealed (--stop-after); the same command resumes
      print(f"{run.name}: lra exited {code}", flush=True)
  return 0


def _unpack(folder: Path) -> None:
  archive = folder / "run.pack"
  if pack.parts_of(archive, existing_only=True) and not any((folder / "checkpoints").glob("*")):
    pack.unpack(archive, None, run_dir=folder)


def pack_stopped(runs: list[TableRun]) -> None:
  """Archives every unfinished run, and every complete pretraining run whose fine-tune is not
  complete yet (it still needs the pretrained checkpoint)."""
  waiting = {run.pretraining.folder for run in runs if run.pretraining and not run.complete()}
  for run in runs:
    if not run.folder.exists() or not any((run.folder / "checkpoints").glob("*")):
      continue
    if not run.complete() or run.folder in waiting:
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
  for p in (listing, worker):
    p.add_argument("--group", choices=("squares", "pilot", "spt", "listops", "pixels"),
                   help="only this list's runs")
  for p in (one, worker):
    p.add_argument("--core", type=int, help="pin to this core, one XLA thread")
    p.add_argument("--stop-after", type=float, metavar="SECONDS", required=p is worker,
                   help="stop sealed within SECONDS; the same command resumes")
  sub.add_parser("pack")
  args = parser.parse_args(argv)
  runs = table_runs()
  if getattr(args, "group", None):
    runs = [r for r in runs if r.group == args.group]
  if args.command == "list":
    for run in (_unfinished(runs) if args.todo else runs):
      print(f"{run.name:44} {run.status()}")
    return 0
  if args.command == "run":
    run = next(r for r in runs if r.name == args.name)
    if run.pretraining is not None:
      _unpack(run.pretraining.folder)
    return run_pinned(run.folder, run.command(), args.core, args.stop_after)
  if args.command == "work":
    chosen = [next(r for r in runs if r.name == n) for n in args.names] if args.names else runs
    return work(chosen, args.core, args.stop_after)
  pack_stopped(runs)
  return 0


if __name__ == "__main__":
  sys.exit(main())
