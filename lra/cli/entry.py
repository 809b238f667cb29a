"""The `lra` command: a thin layer of flags over lra.run, lra.cli.data and friends."""
from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path

from lra.machine import stop_after  # first: it notes when the process started (--stop-after)
from lra import errors  # light: imports nothing
from lra.report import run_summary  # light: no JAX

DEMO = ("listops", "latte", "demo")
DEMO_PRESETS = ("demo", "smoke")  # what the bare `lra` takes; its help says so
# A user's runs and tables go here by default (git-ignored), apart from the repository's committed
# results/runs/ and results/tables/, which `--results-dir results` (runs) and `lra table
# --committed` (tables, README block) write on purpose.
LOCAL_RESULTS = Path("results/local")
COMMITTED_RESULTS = Path("results")
MIXER_HELP = ("a registered mixer (lra list), your own as path/to/file.py:ClassName or "
              "module.path:ClassName, or one an installed package registers (lra.mixers)")
DEMO_HELP = ("With no command, `lra` runs the demo: bidirectional Latte (4 layers, D=64) trains "
             "4,000 steps on generated ListOps (depth <= 4, 8-80 tokens: easier than LRA's) and "
             "prints its test accuracy beside the majority class's; about 5 minutes on 2 CPU "
             "cores, 10 on one (the progress line gives an ETA). Its run folder is "
             "results/local/runs/listops/latte/demo_seed0 (git-ignored); "
             "run `lra` again to see the result, delete the folder to train again. The options "
             "below apply to the demo; each command has its own --help.")


class _NamedPreset(argparse.Action):
  """The top level's --preset, remembering that it was named: its default (paper, for `lra run`
  after it) is not the bare demo's, and `lra --preset paper` must not silently run the demo."""

  def __call__(self, parser, namespace, values, option_string=None):
    setattr(namespace, self.dest, values)
    namespace.preset_named = True


def _add_run_args(p: argparse.ArgumentParser, *, demo: bool = False) -> None:
  from lra.configs.common import CPU_PRESETS, PRESETS, PUBLISHED_PRESETS  # light: ml_collections
  if demo:  # the top level: the bare demo's own defaults, as `lra --help` shows them
    preset_help = ("demo (the default here) or smoke (seconds); other presets: "
                   "`lra run TASK MIXER --preset P` (`lra list`)")
    run_dir_help = "default results/local/runs/listops/latte/demo_seed0"
  else:
    preset_help = (f"{', '.join(PRESETS + CPU_PRESETS + PUBLISHED_PRESETS)} (default paper: the "
                   "Latte paper's settings, accelerator-sized; laptop: ListOps or Pathfinder on a "
                   "CPU; `lra list`)")
    run_dir_help = ("default RESULTS_DIR/runs/TASK/MIXER/PRESET[+CHANGES]_seedN "
                    "(`--dry-run` prints it)")
  p.add_argument("--preset", default="paper", help=preset_help,
                 **({"action": _NamedPreset} if demo else {}))
  p.add_argument("--seed", type=int, help="the run's seed (train.seed, default 0); the run "
                 "folder's name ends in _seedN")
  p.add_argument("--data-dir", type=Path, help="prepared data root (default $LRA_DATA_DIR or "
                 "~/.cache/lra)")
  p.add_argument("--run-dir", type=Path, help=run_dir_help)
  p.add_argument("--results-dir", type=Path, help="where run folders go (default results/local, "
                 "git-ignored; `results` is the repository's committed runs)")
  p.add_argument("--dry-run", action="store_true", help="print the resolved config (each value "
                 "with its source: default, preset or command line), the data cache and the run "
                 "folder; train nothing")
  p.add_argument("--quiet", action="store_true", help="no progress line")
  p.add_argument("--distributed", action="store_true",
                 help="multi-host: call jax.distributed.initialize() first (one process per "
                 "host; also LRA_DISTRIBUTED=1)")


OVERRIDES_HELP = ("Settings: --config.KEY=VALUE (or --config.KEY VALUE), any number, e.g. "
                  "--config.train.num_steps=100 --config.mixers.latte.num_latents=64; "
                  "`--dry-run` lists every KEY with its value and where it comes from.")


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="lra", description="Long Range Arena suite. " + DEMO_HELP,
      epilog=OVERRIDES_HELP)
  _add_run_args(parser, demo=True)
  sub = parser.add_subparsers(dest="command")

  run = sub.add_parser("run", help="train and evaluate one task with one mixer",
                       epilog=OVERRIDES_HELP)
  run.add_argument("task")
  run.add_argument("mixer", help=MIXER_HELP)
  _add_run_args(run)
  run.add_argument("--stop-after", type=float, metavar="SECONDS", help="stop cleanly (a "
                   "checkpoint, status interrupted; the same command resumes) so as to end "
                   "within SECONDS of the command's start, e.g. a scheduler's time limit")

  check = sub.add_parser(
      "check", help="check one mixer against the mixer contract: a PASS/FAIL line per property "
      "with what was measured; exit 1 if any fails",
      epilog="Settings: --config.mixers.NAME.FIELD=VALUE (NAME: the registered name, or the class"
      " name of an import path).")
  check.add_argument("mixer", help=MIXER_HELP)
  check.add_argument("--dim", type=int, default=16, help="D of the small checks (default 16)")
  check.add_argument("--heads", type=int, default=2, help="H (default 2)")
  check.add_argument("--fit", action="store_true", help="also train the mixer on the fitting "
                     "screen (480 Pathfinder images as 4x4 squares, 600 steps, 1-3 min on one "
                     "core): one that cannot fit them will not learn a table's task")

  sub.add_parser("list", help="tasks, mixers and presets (with the tasks each applies to)")

  evaluate = sub.add_parser("eval", help="evaluate a run's saved checkpoint on a split (printed "
                            "and appended to the run's evals.jsonl)")
  evaluate.add_argument("run_dir", type=Path)
  evaluate.add_argument("--checkpoint", default="best", choices=("best", "last"),
                        help="best validation step (default) or the latest checkpoint")
  evaluate.add_argument("--split", default="test", help="train, val or test (default)")
  evaluate.add_argument("--data-dir", type=Path)
  evaluate.add_argument("--predictions", type=Path, metavar="FILE.npy",
                        help="also save the predicted class of every example of the split, in "
                        "the prepared split's order ([N] int32)")

  packer = sub.add_parser("pack", help="write a run folder as one archive (split into 16 MiB "
                          "parts when larger) that `lra unpack` puts back elsewhere")
  packer.add_argument("run_dir", type=Path)
  packer.add_argument("archive", type=Path, metavar="FILE.pack")
  unpacker = sub.add_parser("unpack", help="put a packed run back at RESULTS_DIR/runs/TASK/"
                            "MIXER/NAME (checked); the same `lra run` then resumes it")
  unpacker.add_argument("archive", type=Path, metavar="FILE.pack",
                        help="the archive, or any of its parts FILE.pack.N")
  unpack_to = unpacker.add_mutually_exclusive_group()
  unpack_to.add_argument("--results-dir", type=Path, help="default results/local (where `lra run` "
                         "puts runs); `results` for the repository's committed runs")
  unpack_to.add_argument("--run-dir", type=Path, help="put the run in this folder instead: for a "
                         "run made with `lra run --run-dir` (a study's), resumed the same way")

  diff = sub.add_parser("diff", help="what differs between two runs: config, data, code, "
                        "versions, device, scores")
  diff.add_argument("run_a", type=Path)
  diff.add_argument("run_b", type=Path)

  plot = sub.add_parser(
      "plot", help="curves of one or many runs in one PNG: val and test accuracy, train and "
      "val loss against steps",
      epilog="e.g. lra plot results/local/runs/listops   or   lra plot 'results/runs/listops/*/"
      "laptop_seed0' -o laptop.png")
  plot.add_argument("runs", nargs="+", metavar="RUN", help="a run folder, a folder of runs "
                    "(any depth: results/local/runs), or a glob of either")
  plot.add_argument("-o", "--output", type=Path, metavar="FILE.png", help="default "
                    "results/local/plots/TASK_MIXER_RUN.png, each part the runs' values joined "
                    "by + (printed, and said when it replaced a file)")

  table = sub.add_parser(
      "table", help="accuracy tables from the runs of a results folder",
      description="Writes RESULTS_DIR/tables/*.csv|md from RESULTS_DIR/runs/*, with the "
      "repository's committed runs (rows marked committed, never averaged with yours) and the "
      "published numbers beside; touches no README unless asked (--readme, --committed).")
  table.add_argument("--results-dir", type=Path, help="the folder to read (default "
                     "results/local, your runs; with --committed or --check: results)")
  table.add_argument("--readme", type=Path, help="also rewrite the generated block between the "
                     "lra-table markers of this file")
  table.add_argument("--committed", action="store_true", help="the repository's own tables: "
                     "read results/, write results/tables/* and README.md's block")
  table.add_argument("--check", action="store_true", help="write nothing; exit 1 if the tables "
                     "(and README block) differ from what the runs give (default: the committed "
                     "ones, as CI checks them)")
  table.add_argument("--mine-only", action="store_true", help="leave out the repository's "
                     "committed rows that your tables show beside yours")

  status = sub.add_parser(
      "status", help="which task x mixer x preset runs are complete (score), in progress (step "
      "of steps) or not run: yours and the repository's committed ones")
  status.add_argument("--results-dir", type=Path, help="your runs' folder (default "
                      "results/local)")
  status.add_argument("--presets", nargs="+", metavar="PRESET", help="the grids to show "
                      "(default: paper, and every preset with a run)")
  status.add_argument("--mine-only", action="store_true", help="leave out the repository's "
                      "committed runs")
  status.add_argument("--ledger", type=Path, help="the ledger of paper rows whose accelerator "
                      "costs the cells show (default: the repository's results/ledger.json)")

  sweep = sub.add_parser(
      "sweep", help="every (task, mixer, seed) run: print, run or emit a Slurm array; complete "
      "runs are skipped, partial ones resume",
      description="Plans `lra run TASK MIXER --preset P --config.train.seed=S` for every task, "
      "mixer and seed, names the runs whose data is not prepared, then prints the pending "
      "commands (default), runs them one by one (--run), or writes a Slurm array job "
      "(--emit slurm). Any --config.KEY=VALUE applies to every run.",
      epilog="On a cluster: lra sweep --tasks listops --mixers latte softmax --seeds 0 1 2 "
      "--data-dir /shared/lra --emit slurm --time 08:00:00 --sbatch=--gres=gpu:1, then "
      "sbatch lra_sweep.sbatch from the same folder.")
  sweep.add_argument("--tasks", nargs="+", required=True, metavar="TASK",
                     help="tasks to run (lra list)")
  sweep.add_argument("--mixers", nargs="+", required=True, metavar="MIXER", help=MIXER_HELP +
                     "; or a group: builtin (every mixer of the suite, `lra list`'s built-in "
                     "ones) or all (those and every mixer an installed package registers)")
  sweep.add_argument("--seeds", nargs="+", type=int, default=[0], metavar="SEED",
                     help="one run per seed, each in its own _seedN folder (default 0)")
  sweep.add_argument("--preset", default="paper", help="the preset of every run (default paper)")
  sweep.add_argument("--data-dir", type=Path, help="prepared data root the runs read (default "
                     "$LRA_DATA_DIR or ~/.cache/lra); on a cluster, a folder every node sees")
  sweep.add_argument("--results-dir", type=Path,
                     help="where run folders go (default results/local, git-ignored)")
  sweep.add_argument("--run", action="store_true", help="run the pending commands one by one, "
                     "here")
  sweep.add_argument("--emit", choices=("commands", "slurm"), default="commands",
                     help="commands: print the pending `lra run` commands (default); slurm: "
                     "write an sbatch array script with one run per array task (--out)")
  sweep.add_argument("--out", type=Path, default=Path("lra_sweep.sbatch"),
                     help="where --emit slurm writes the array job script (default "
                     "lra_sweep.sbatch)")
  sweep.add_argument("--sbatch", action="append", default=[], metavar="OPTION",
                     help="extra #SBATCH line, e.g. --sbatch=--gres=gpu:1 (repeatable)")
  from lra.cli.slurm import DEFAULT_TIME, STOP_BEFORE_LIMIT_S, current_env_activate
  sweep.add_argument("--time", default=DEFAULT_TIME, metavar="[D-]HH:MM:SS",
                     help=f"Slurm time limit of each array task (default {DEFAULT_TIME}); a run "
                     f"still going saves a checkpoint {STOP_BEFORE_LIMIT_S} s before it and stops, "
                     "and submitting the script again resumes it")
  sweep.add_argument("--env-activate", type=Path, default=current_env_activate(), metavar="PATH",
                     help="script the array task sources first, e.g. .venv/bin/activate (default: "
                     "the virtual environment running this command, if any; `none`: no line)")

  bench = sub.add_parser("bench", help="train-step time and memory per mixer and length",
                         epilog="Defaults: the Latte paper's Text model (6 layers, D=256, 4 heads, "
                         "batch 32). Any --config.KEY=VALUE applies to every mixer.")
  bench.add_argument("--mixers", help="comma-separated (default: all registered)")
  bench.add_argument("--lengths", default="1024,2048,4096,8192,16384")
  bench.add_argument("--batch", type=int, default=32)
  bench.add_argument("--dim", type=int, default=256)
  bench.add_argument("--layers", type=int, default=6)
  bench.add_argument("--heads", type=int, default=4)
  bench.add_argument("--steps", type=int, default=5, help="timed steps per record (median)")
  bench.add_argument("--min-time", type=float, default=1.0, help="keep timing short steps "
                     "until this many seconds have passed")
  bench.add_argument("--warmup", type=int, default=2, help="untimed steps after compiling")
  bench.add_argument("--matmul-n", type=int, help="size of the matmul timed for the FLOP/s peak "
                     "(default 1024 on CPU, 8192 on accelerators)")
  bench.add_argument("--json", type=Path, help="write the records here")
  bench.add_argument("--md", type=Path, help="write the Markdown table here")
  bench.add_argument("--plot", type=Path, help="write the log-log time/memory plot here (PNG)")
  bench.add_argument("--readme", type=Path, help="also write the per-mixer summary into this "
                     "page (docs/performance.md holds the committed one), between "
                     "<!-- lra-bench:start --> and <!-- lra-bench:end -->")
  bench.add_argument("--in-process", action="store_true", help="measure every record in this "
                     "process (faster; peak RSS is then cumulative)")
  bench.add_argument("--xla-log", type=Path, metavar="FILE", help="write XLA's own log (the GPU "
                     "autotuner's included) here; by default it is dropped")
  epoch = bench.add_argument_group(
      "one training epoch (--epoch TASK)", "The time of an epoch of TASK's prepared training "
      "data per batching mode, with compile counts; the model is the preset's (--preset, "
      "--config.*), --mixers picks the mixer (default latte), --steps the timed calls per "
      "program shape.")
  epoch.add_argument("--epoch", metavar="TASK", help="time one epoch of TASK instead")
  epoch.add_argument("--preset", default="paper")
  epoch.add_argument("--data-dir", type=Path, help="prepared data root (default $LRA_DATA_DIR "
                     "or ~/.cache/lra)")
  epoch.add_argument("--modes", default="fixed,batch,sorted2,sorted4,sorted8,bucketing",
                     help="fixed (pad to T), batch (pad to each batch), sortedK (the batch's rows "
                     "by length in K micro-batches, each padded to its own), bucketing")
  epoch.add_argument("--quantum", type=int, help="per-batch padding quantum (default: the "
                     "config's data.pad_quantum)")
  epoch.add_argument("--full-epoch", action="store_true", help="time every step (default: "
                     "time --steps calls per program shape and sum over the epoch's steps)")
  epoch.add_argument("--sample-steps", type=int, metavar="N", help="time N whole steps of each "
                     "mode, evenly spread over the epoch (fewer shapes to compile)")

  data = sub.add_parser("data", help="generate, prepare and inspect data")
  data_sub = data.add_subparsers(dest="data_command", required=True)
  gen = data_sub.add_parser("generate", help="write LRA-format files (no download)")
  gen_sub = gen.add_subparsers(dest="generator", required=True)
  listops = gen_sub.add_parser(
      "listops", help="basic_{train,val,test}.tsv like the release",
      description="ListOps as LRA's generator makes it (its code's data/listops.py, seeded here): "
      "each default is LRA's; docs/data.md describes the trees.")
  listops.add_argument("--out", type=Path, required=True,
                       help="the folder for basic_{train,val,test}.tsv (then `lra data prepare "
                       "listops --source OUT`)")
  listops.add_argument("--num-train", type=int, default=96_000,
                       help="training expressions (default %(default)s, LRA's)")
  listops.add_argument("--num-val", type=int, default=2_000,
                       help="validation expressions (default %(default)s, LRA's)")
  listops.add_argument("--num-test", type=int, default=2_000,
                       help="test expressions (default %(default)s, LRA's)")
  listops.add_argument("--min-length", type=int, default=500,
                       help="keep expressions longer than this many tokens (operators, closers "
                       "and digits; default %(default)s, LRA's)")
  listops.add_argument("--max-length", type=int, default=2000,
                       help="keep expressions shorter than this many tokens (default "
                       "%(default)s, LRA's; prepare pads to the longest, rounded up to 16)")
  listops.add_argument("--max-depth", type=int, default=10,
                       help="the deepest nesting: a node above it is a digit with probability "
                       "0.75, else an operator; at it, always a digit (default %(default)s, "
                       "LRA's)")
  listops.add_argument("--max-args", type=int, default=10,
                       help="an operator (MIN, MAX, MED, SM) takes 2 to this many arguments, "
                       "uniformly (default %(default)s, LRA's)")
  # Its own dest: the top level's --seed (a run's, default None) would otherwise replace this
  # default (_let_global_flags_through), leaving the generator unseeded.
  listops.add_argument("--seed", dest="generator_seed", type=int, default=0,
                       help="the generator's seed (default 0: the suite's files)")
  listops.add_argument("--workers", type=int, default=1, help="processes (default 1): the same "
                       "files, faster, for the default recipe (its stream states are recorded)")
  pathfinder = gen_sub.add_parser(
      "pathfinder", help="pathfinder<res>/curv_*/imgs + metadata like the release (Path-X = 128)")
  pathfinder.add_argument("--out", type=Path, required=True,
                          help="the root: images go to OUT/pathfinder<RESOLUTION>/<curv folder>/ "
                          "(then `lra data prepare pathfinder --source OUT`)")
  pathfinder.add_argument("--resolution", type=int, default=32, choices=(32, 64, 128, 256),
                          help="image side in pixels: 32 (default, the pathfinder task), 128 "
                          "(Path-X), or 64 and 256")
  pathfinder.add_argument("--difficulty", default="hard", choices=("easy", "intermediate", "hard"),
                          help="contour length 6 (curv_baseline), 9 or 14 (default, LRA)")
  pathfinder.add_argument("--num-images", type=int, default=200_000,
                          help="images in all, half of them connected; prepare splits them "
                          "80/10/10 (default %(default)s, the release's per resolution and "
                          "difficulty)")
  pathfinder.add_argument("--seed", dest="generator_seed", type=int, default=0,
                          help="the generator's seed (default 0: the suite's files)")
  pathfinder.add_argument("--workers", type=int, default=1,
                          help="processes (default 1; the same output for any)")
  pathfinder.add_argument("--stats", action="store_true",
                          help="also write stats.json (distractors placed, ink, halo, components, "
                               "markers, marker-distance leak; docs/pathfinder.md compares them)")

  prep = data_sub.add_parser("prepare", help="raw release / archive -> cache")
  prep.add_argument("task")
  prep.add_argument("--source", type=Path, required=True)
  prep.add_argument("--data-dir", type=Path)
  prep.add_argument("--cache-name", help="folder under --data-dir (default: the task name)")
  prep.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="task-specific prepare option (repeatable)")

  insp = data_sub.add_parser("inspect", help="what the model sees, decoded")
  insp.add_argument("task")
  insp.add_argument("--split", default="train")
  which = insp.add_mutually_exclusive_group()
  which.add_argument("--index", type=int)
  which.add_argument("--all", action="store_true")
  insp.add_argument("--json", action="store_true", help="one JSON object per line")
  insp.add_argument("--data-dir", type=Path)
  insp.add_argument("--preset", default="paper", help="whose cache to read (demo/smoke: "
                    "their generated data)")
  insp.add_argument("--cache-name")

  check = data_sub.add_parser("verify", help="sha256 of every cached array against meta.json "
                              "(loading checks sizes and samples only); exit 1 if any differs")
  check.add_argument("task")
  check.add_argument("--data-dir", type=Path)
  check.add_argument("--preset", default="paper", help="whose cache to check (demo/smoke: "
                     "their generated data)")
  check.add_argument("--cache-name")
  _let_global_flags_through(parser)
  _describe_subcommands(parser)
  return parser


def _describe_subcommands(parser: argparse.ArgumentParser) -> None:
  """`lra pack --help` opens with the line `lra --help` lists for pack: a subcommand's one-line
  help becomes its own page's description where it has none of its own."""
  for action in parser._actions:  # pylint: disable=protected-access
    if isinstance(action, argparse._SubParsersAction):  # pylint: disable=protected-access
      helps = {a.dest: a.help for a in action._choices_actions}  # pylint: disable=protected-access
      for name, sub in action.choices.items():
        if sub.description is None and helps.get(name):
          sub.description = helps[name][0].upper() + helps[name][1:] + "."
        _describe_subcommands(sub)


def _let_global_flags_through(parser: argparse.ArgumentParser) -> None:
  """`lra --data-dir D data prepare ...` must use D: a subcommand's own default for a flag the
  top level also has would otherwise overwrite it silently. Subcommands keep the flag, without a
  default of their own (the top level's, which must be the same: a flag whose default differs
  needs its own dest, as the generators' --seed has)."""
  shared = {a.dest: a.default for a in parser._actions  # pylint: disable=protected-access
            if a.option_strings}
  pending = [parser]
  while pending:
    for action in pending.pop()._actions:  # pylint: disable=protected-access
      if isinstance(action, argparse._SubParsersAction):  # pylint: disable=protected-access
        for sub in action.choices.values():
          for a in sub._actions:  # pylint: disable=protected-access
            if a.option_strings and a.dest in shared and a.dest != "help":
              if a.default not in (shared[a.dest], argparse.SUPPRESS):
                raise AssertionError(f"{sub.prog} {a.option_strings[0]}: default {a.default!r} "
                                     f"would be replaced by the top level's {shared[a.dest]!r}")
              a.default = argparse.SUPPRESS
          pending.append(sub)


def main(argv: Sequence[str] | None = None) -> int:
  as_command = argv is None  # the `lra` command itself, not a caller passing its arguments
  stop_after.command_started(as_command)  # --stop-after counts from the process's start, or now
  argv, overrides = split_overrides(list(sys.argv[1:] if argv is None else argv))
  args = build_parser().parse_args(argv)
  # Orbax logs a failed background save through absl, with its threads' tracebacks; the run
  # reports the failure itself, once, with the fix (checkpoints.CheckpointWriteError).
  logging.getLogger("absl").setLevel(logging.CRITICAL)
  try:
    code = _dispatch(args, overrides)
    sys.stdout.flush()  # here, so a reader that stopped early (`| head`) is met below
    return code
  except BrokenPipeError:
    return _reader_gone()
  except Exception as e:  # pylint: disable=broad-except
    _exit_if_a_peer_was_lost(e)
    return _report(e, as_command)
  except KeyboardInterrupt:
    print("\nlra: interrupted", file=sys.stderr)
    return 130


def _report(error: Exception, as_command: bool) -> int:
  """A mistake (lra/errors.py: the user's or their machine's) is one line and exit code 2; a bug
  is exit code 1 with its traceback: printed here, or, for a run that failed, in the error.log its
  one line names (train.RunFailed)."""
  train = sys.modules.get("lra.training.train")
  if train and isinstance(error, train.RunFailed):
    print(f"lra: error: {error}", file=sys.stderr)
    return 1
  if not errors.is_mistake(error):
    traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
    print(f"lra: internal error: {type(error).__name__}: {error} (a bug in lra, not a mistake in "
          f"your command: the traceback above says where; please report it with the command)",
          file=sys.stderr)
    return 1
  print(f"lra: error: {error}", file=sys.stderr)
  ckpt = sys.modules.get("lra.runs.checkpoints")
  if as_command and ckpt and isinstance(error, ckpt.CheckpointWriteError):
    _quiet_from_here()
  return 2


def _quiet_from_here() -> None:
  """Nothing more on stderr from this process. After a failed checkpoint write, Orbax's writes
  still in flight can print dozens of tracebacks ("Event loop is closed") from its native threads
  while Python shuts down, under the one line that said what failed and how to resume. Only for
  the `lra` command itself: a caller of main(argv) keeps its stderr."""
  sys.stderr.flush()
  _point_at_devnull(sys.stderr)


def split_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
  """(the other arguments, the `KEY=VALUE` of each --config.KEY=VALUE or --config.KEY VALUE).

  The space form takes the next argument as the value unless it is another option (`--...`);
  a negative number (`-1`) is a value.
  """
  rest, overrides = [], []
  items = iter(range(len(argv)))
  for i in items:
    arg = argv[i]
    if not arg.startswith("--config."):
      rest.append(arg)
      continue
    item = arg[len("--config."):]
    if "=" not in item and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
      item += "=" + argv[i + 1]
      next(items)
    overrides.append(item)
  return rest, overrides


def run_config(argv: Sequence[str]):
  """The config `lra run TASK MIXER ...` resolves for these arguments (after `lra`), --seed and
  both --config forms included: for tools that must name the run a command makes (the ledger)."""
  from lra.runs.config_loading import resolve_config
  rest, overrides = split_overrides(list(argv))
  args = build_parser().parse_args(rest)
  if args.command != "run":
    raise errors.BadValue(f"expected `lra run TASK MIXER ...`, got `lra {' '.join(argv)}`")
  return resolve_config(args.task, args.mixer, args.preset, _seeded(args, overrides))


def _reader_gone() -> int:
  """stdout's reader closed it (`lra ... | head -3`): stop quietly, as `yes | head` does.

  What is left in stdout's buffer is dropped: pointing stdout at /dev/null lets the interpreter's
  final flush succeed instead of printing a second BrokenPipeError.
  """
  _point_at_devnull(sys.stdout)
  return 128 + 13  # a shell's status for a writer stopped by SIGPIPE (13)


def _point_at_devnull(stream) -> None:
  """What the process writes to `stream`'s file from now on goes nowhere."""
  try:
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, stream.fileno())
    os.close(null)
  except (OSError, ValueError, AttributeError):  # a replaced stream (tests) has no file to repoint
    pass


def _exit_if_a_peer_was_lost(error: Exception) -> None:
  """A multi-host run that lost a process ends here: one line, then an immediate exit.

  Not a normal exit: JAX's exit handler would wait at a shutdown barrier for the lost process
  (minutes), and Orbax threads for saves that can no longer finish.
  """
  if "jax" not in sys.modules:
    return
  from lra.machine import distributed
  lost = distributed.lost_peer(error)
  if lost is None:
    return
  print(f"lra: {lost.hint()}", file=sys.stderr)
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(distributed.EXIT_PEER_LOST)  # pylint: disable=protected-access


def _dispatch(args: argparse.Namespace, overrides: list[str]) -> int:
  if args.command == "table":
    return table_command(args)  # its default folder depends on --committed/--check
  if getattr(args, "results_dir", None) is None:
    args.results_dir = LOCAL_RESULTS
  if args.command == "check":
    return check_command(args, overrides)
  if args.command == "status":
    from lra.report import status
    committed = None if args.mine_only else _committed_beside(args.results_dir)
    return status.main(args.results_dir, committed, args.presets,
                       args.ledger or status.default_ledger())
  if args.command == "sweep":
    from lra.cli import sweep
    return sweep.main(args, overrides)
  if args.command == "plot":
    from lra.report import plot
    return plot.main(args)
  if args.command in ("pack", "unpack"):
    from lra.runs import pack
    return pack.command(args)
  if args.command == "diff":
    from lra.report import run_diff
    print(run_diff.format_diff(run_diff.diff_runs(args.run_a, args.run_b), args.run_a,
                               args.run_b))
    return 0
  if args.command == "eval":
    from lra.training import evaluation
    record = evaluation.evaluate_run(args.run_dir, checkpoint=args.checkpoint, split=args.split,
                                     data_dir=args.data_dir, predictions=args.predictions)
    print(f"{args.run_dir}: {record['checkpoint']} checkpoint (step {record['step']}) on "
          f"{record['split']}: accuracy {100 * record[args.split + '/accuracy']:.2f}%, loss "
          f"{record[args.split + '/loss']:.4f} over {record[args.split + '/num_examples']} "
          f"examples; appended to {args.run_dir / evaluation.EVALS_FILE}")
    if args.predictions:
      print(f"predicted classes: {args.predictions}")
    return 0
  if args.command in (None, "run"):
    overrides = _seeded(args, overrides)
    _warn_unused_overrides(*(_demo(args) if args.command is None else
                             (args.task, args.mixer, args.preset)), overrides)
  if args.command in (None, "run") and args.dry_run:
    from lra.report import dry_run
    task, mixer, preset = (args.task, args.mixer, args.preset) if args.command else _demo(args)
    print(dry_run.describe(task, mixer, preset, overrides, results_dir=args.results_dir,
                           run_dir=args.run_dir, data_dir=args.data_dir))
    return 0
  from lra import run  # deferred: `lra --help` should not wait for JAX
  from lra.cli import data
  if args.command in (None, "run"):
    from lra.machine import distributed
    distributed.initialize(args.distributed)  # before anything touches a device
  if args.command is None:
    return run_demo(args, overrides)
  if args.command == "run":
    stop_after.check_limit(args.stop_after)
    result = run.run(args.task, args.mixer, preset=args.preset, overrides=overrides,
                     data_dir=args.data_dir, run_dir=args.run_dir,
                     results_dir=args.results_dir, progress=not args.quiet,
                     stop_after_s=args.stop_after)
    print_result(result)
    return exit_code(result)
  if args.command == "list":
    data.print_list()
    return 0
  if args.command == "data":
    return data.dispatch(args)
  if args.command == "bench" and args.epoch:
    from lra.bench import epoch
    return epoch.main(args, overrides)
  if args.command == "bench":
    from lra.bench import step_time
    return step_time.main(args, overrides)
  raise AssertionError(args.command)


def table_command(args: argparse.Namespace) -> int:
  from lra.report import results, tables
  committed = args.committed or (args.check and args.results_dir is None)
  results_dir = args.results_dir or (COMMITTED_RESULTS if committed else LOCAL_RESULTS)
  if args.results_dir is not None and not results_dir.is_dir():
    raise errors.NotFound(f"no runs under {results_dir}: the folder does not exist (`lra run "
                          f"TASK MIXER --results-dir {results_dir}` writes runs there)")
  readme = args.readme
  if readme is None and committed and (results_dir.parent / "README.md").exists():
    readme = results_dir.parent / "README.md"
  # The committed tables are the committed runs' alone; a user's show those runs beside theirs.
  beside = None if committed or args.mine_only else _committed_beside(results_dir)
  what = (f"{results_dir / 'tables'}/" + (f" and {readme}'s block" if readme else "")
          + f" from {results.count_runs(results_dir)} complete run(s) in {results_dir / 'runs'}/"
          + (f", beside {results.count_runs(beside)} committed run(s) in {beside / 'runs'}/"
             if beside else ""))
  if args.check:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", results.RunFileWarning)  # reported below, as failures
      stale = tables.check(results_dir, readme, beside)
    unreadable = results.unreadable_run_files(results_dir)
    for problem in unreadable:
      print(f"lra table --check: {problem}", file=sys.stderr)
    for path in stale:
      print(f"lra table --check: {path} differs from what the runs give", file=sys.stderr)
    if stale:
      fix = "lra table --committed" if committed else f"lra table --results-dir {results_dir}"
      print(f"Run `{fix}` and commit the result.", file=sys.stderr)
    if not stale and not unreadable:
      print(f"lra table --check: up to date: {what}")
    return 1 if stale or unreadable else 0
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", results.RunFileWarning)
    written = tables.write(results_dir, readme, beside)
  for warning in caught:  # a skipped run file: one plain line, not Python's warning format
    if issubclass(warning.category, results.RunFileWarning):
      print(f"lra table: warning: {warning.message}", file=sys.stderr)
    else:
      warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
  for path in written:
    print(f"wrote {path}")
  print(f"lra table{' --committed' if args.committed else ''}: "
        f"{f'{len(written)} file(s) changed' if written else 'nothing changed'}: {what}")
  if not (results_dir / "runs").is_dir():
    writes = "lra run TASK MIXER" + ("" if args.results_dir is None else
                                     f" --results-dir {results_dir}")
    holds = "the committed and published rows" if beside else "the published rows only"
    print(f"lra table: no runs in {results_dir / 'runs'} yet: the tables hold {holds} "
          f"(`{writes}` writes runs there)", file=sys.stderr)
  return 0


def _committed_beside(results_dir: Path) -> Path | None:
  """The repository's committed results, shown beside the runs of another folder (None when
  `results_dir` is that folder, or this is not a checkout)."""
  from lra.report import results
  committed = results.committed_results_dir()
  if committed is None or Path(results_dir).resolve() == committed.resolve():
    return None
  return committed


def check_command(args: argparse.Namespace, overrides: list[str]) -> int:
  """`lra check MIXER`: the contract's properties, one line each; 1 if any fails."""
  from lra.runs.config_loading import apply_overrides, use_mixer
  from lra.configs.common import base_config
  from lra.models.mixers import find_mixer
  from lra.models.mixers.contract import PADS, PROPERTIES, MixerContract
  for item in overrides:
    if not item.startswith("mixers."):
      raise errors.BadValue(f"--config.{item}: lra check reads only "
                            "--config.mixers.NAME.FIELD=VALUE (sizes: --dim, --heads).")
  config = base_config("check", "check", "latte", tokens=False)  # only its mixer blocks are read
  config.lock()
  use_mixer(config, args.mixer)
  settings = apply_overrides(config, overrides).mixers[config.model.mixer].to_dict()
  found = find_mixer(args.mixer)
  contract = MixerContract(found.cls, settings, dim=args.dim, num_heads=args.heads)
  print(f"lra check {args.mixer}: {found.cls.__name__}"
        f"({', '.join(f'{k}={v!r}' for k, v in settings.items())}) at D={args.dim}, "
        f"H={args.heads}, T={contract.length} (2 rows, the second ending in {PADS} pads)"
        + (f"; source sha256 {found.source['sha256'][:8]}" if found.source else ""), flush=True)
  failed, skipped = [], []
  for name in PROPERTIES:
    result = contract.check(name)
    print(result.line(), flush=True)
    if result.passed is False:
      failed.append(name)
    if result.skipped:
      skipped.append(name)
  if failed:
    print(f"lra check: {len(failed)} of {len(PROPERTIES)} properties fail: {', '.join(failed)}"
          + (f"; {len(skipped)} skipped until it passes" if skipped else ""))
    return 1
  print(f"lra check: {args.mixer} meets the mixer contract")
  if not args.fit:
    return 0
  from lra.bench import fit_screen
  fit = fit_screen.screen(args.mixer, overrides=tuple(overrides))  # its --config.mixers.*
  print(fit.line(), flush=True)
  return 0 if fit.fits else 1


def exit_code(result: dict) -> int:
  """0 complete, 130 interrupted (saved; run again to resume), 1 otherwise (diverged)."""
  return {"complete": 0, "interrupted": 130}.get(result["status"], 1)


def print_result(result: dict) -> None:
  print("\n".join(run_summary.result_lines(result)))


def _demo(args: argparse.Namespace) -> tuple[str, str, str]:
  """The bare demo's task, mixer and preset: demo, or smoke when named; any other preset is
  refused with the `lra run` command that takes it (the bare command runs only the demo)."""
  task, mixer, preset = DEMO
  if not getattr(args, "preset_named", False):
    return DEMO
  if args.preset in DEMO_PRESETS:
    return task, mixer, args.preset
  from lra.configs.common import (CPU_PRESETS, OWN_ARCHITECTURE_PRESETS, PRESETS,
                                  PUBLISHED_PRESETS)
  if args.preset not in PRESETS + CPU_PRESETS + PUBLISHED_PRESETS:
    fix = "`lra list` shows every preset and the tasks it takes"
  else:
    example = "s5" if args.preset in OWN_ARCHITECTURE_PRESETS else mixer
    fix = f"name the task and mixer: `lra run {task} {example} --preset {args.preset}`"
  raise errors.BadValue(f"the bare `lra` runs the demo and takes --preset "
                        f"{' or '.join(DEMO_PRESETS)}, not '{args.preset}'; {fix}.")


def _warn_unused_overrides(task: str, mixer: str, preset: str, overrides: list[str]) -> None:
  """One line per --config.mixers.OTHER.KEY: accepted (the key exists) but read by no part of
  this run, which is almost always a slip."""
  from lra.runs.config_loading import resolve_config, unused_overrides
  if not any(o.startswith("mixers.") for o in overrides):
    return
  used = resolve_config(task, mixer, preset, overrides).model.mixer
  for item in unused_overrides([used], overrides):
    other = item.split(".")[1]
    print(f"lra: warning: --config.{item} sets a {other} setting, but this run's mixer is "
          f"{used}: it changes nothing (this run's own: --config.mixers.{used}.KEY=VALUE)",
          file=sys.stderr)


def _seeded(args: argparse.Namespace, overrides: list[str]) -> list[str]:
  """The overrides with --seed N as train.seed=N (a --config.train.seed that disagrees is
  refused: which one was meant?)."""
  if getattr(args, "seed", None) is None:
    return overrides
  for item in overrides:
    key, _, value = item.partition("=")
    if key.strip() == "train.seed" and value.strip() != str(args.seed):
      raise errors.BadValue(f"--seed {args.seed} and --config.{item} disagree; pass one of them.")
  return [*overrides, f"train.seed={args.seed}"]


def run_demo(args: argparse.Namespace, overrides: list[str]) -> int:
  from lra import run
  task, mixer, preset = _demo(args)
  print("lra demo: bidirectional Latte on generated ListOps, on this machine's CPU/GPU.\n"
        "The demo data is easier than LRA's ListOps (expressions of depth <= 4, 8-80 tokens, "
        "instead of depth 10, length 500-2000) so that a small model learns it in minutes; the "
        "full task on a CPU: `lra run listops latte --preset laptop`.", file=sys.stderr)
  result = run.run(task, mixer, preset=preset, overrides=overrides, data_dir=args.data_dir,
                   run_dir=args.run_dir, results_dir=args.results_dir, progress=not args.quiet)
  print_result(result)
  if result["test_accuracy"] is not None:
    gain = 100 * (result["test_accuracy"] - result["majority_accuracy"])
    print(f"  {gain:+.1f} points over the majority class")
  return exit_code(result)


if __name__ == "__main__":
  sys.exit(main())
