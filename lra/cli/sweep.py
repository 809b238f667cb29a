"""`lra sweep`: the `lra run` command of every (task, mixer, seed): printed, run, or a Slurm array.

A run's state comes from its directory: complete (skipped), stopped (diverged or failed: skipped,
as the ledger does, since rerunning would end the same way; lra.report.run_summary.STOPPED),
partial (its command resumes from the latest checkpoint) or new. A
pending run whose data is not prepared is named in a warning before anything is emitted or run.
With --spt each (task, mixer, seed) is two runs: `lra pretrain`, then the fine-tune `lra run
--init-from` its folder; a Slurm sweep is then two arrays, the second waiting on the first task
by task (`--dependency=aftercorr`), submitted together by one script.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lra import errors
from lra.cli.common import local_results, add_command
from lra.cli.slurm import (DEFAULT_TIME, STOP_BEFORE_LIMIT_S, current_env_activate, slurm_script,
                           spt_submit_script)
from lra.report.run_summary import STOPPED
from lra.runs import run_identity, start
from lra.runs.command import MIXER_HELP
from lra.runs.config_loading import (data_cache_dir, default_data_dir, default_run_dir,
                                     missing_data, resolve_config, unused_overrides)


# Words --mixers takes for groups of mixers (`lra sweep --help` says what each means).
MIXER_GROUPS = ("builtin", "all")


def expand_mixers(mixers: Sequence[str]) -> list[str]:
  """The MIXER arguments with the groups replaced by the mixers they name, in `lra list`'s order:
  `builtin` every mixer of the suite, `all` those and every mixer an installed package registers
  (lra.mixers entry points). A mixer named twice runs once."""
  groups = {}
  if set(MIXER_GROUPS) & set(mixers):
    from lra.models.mixers import MIXERS, entry_points  # pylint: disable=import-outside-toplevel
    groups = {"builtin": list(MIXERS), "all": [*MIXERS, *entry_points()]}
  return list(dict.fromkeys(m for mixer in mixers for m in groups.get(mixer, [mixer])))


@dataclass(frozen=True)
class Job:
  task: str
  mixer: str
  seed: int
  run_dir: Path
  state: str  # new | partial | complete | diverged | failed
  argv: tuple[str, ...]  # arguments after `lra`
  mixer_key: str = ""  # the name its config block has (an outside mixer's class name)
  data_missing: str | None = None  # how to make its data, when it is not prepared
  phase: str = ""  # "" (from scratch) | "pretrain" | "spt" (its fine-tune), run_identity.phase
  after: Path | None = None  # a fine-tune's pretraining run folder (its --init-from)

  @property
  def pending(self) -> bool:
    return self.state in ("new", "partial")

  def command(self) -> str:
    return shlex.join(("lra", *self.argv))


def run_state(run_dir: Path) -> str:
  """new | partial | complete | diverged | failed, from what the run directory holds."""
  final = Path(run_dir) / "final.json"
  if final.exists():
    status = json.loads(final.read_text()).get("status")
    if status == "complete" or status in STOPPED:
      return status
    return "partial"
  return "partial" if (Path(run_dir) / "checkpoints").exists() else "new"


def grid_settings(grid: Sequence[str]) -> list[list[str]]:
  """`--grid KEY=V1,V2` (any number of them) -> every combination of their values, each a list
  of KEY=VALUE overrides: ["a=1,2", "b=x"] -> [["a=1", "b=x"], ["a=2", "b=x"]]."""
  axes = []
  for item in grid:
    key, sep, values = item.partition("=")
    if not sep or not key.strip() or not values.strip():
      raise errors.BadValue(f"--grid {item}: expected KEY=VALUE1,VALUE2,... (e.g. --grid "
                            "train.learning_rate=1e-3,5e-4)")
    axes.append([f"{key.strip()}={v.strip()}" for v in values.split(",") if v.strip()])
  return [list(combination) for combination in itertools.product(*axes)] if axes else [[]]


def plan(tasks: Sequence[str], mixers: Sequence[str], seeds: Sequence[int], *, preset: str,
         results_dir: Path, data_dir: Path | None = None,
         overrides: Sequence[str] = (), spt: bool = False,
         grid: Sequence[str] = ()) -> list[Job]:
  """Every (task, mixer, setting of `grid`, seed) in that order, with its run dir (lra run's
  default: a setting of the grid is a departure from the preset, so it names the folder) and
  state; `mixers` may name groups (`builtin`, `all`: expand_mixers). With `spt`, each is a
  pretraining job followed by its fine-tune (from the pretraining's folder)."""
  mixers = expand_mixers(mixers)
  if any(o.split("=")[0].strip() == "train.seed" for o in overrides):
    raise errors.BadValue("lra sweep sets train.seed from --seeds; drop --config.train.seed=... "
                          "and pass --seeds 0 1 2 instead.")
  combinations = grid_settings(grid)
  if any(c.partition("=")[0] == "train.seed" for combination in combinations for c in combination):
    raise errors.BadValue("--grid train.seed=...: seeds come from --seeds (e.g. --seeds 3 4), "
                          "each run in its own _seedN folder; drop the grid on train.seed")
  keys = {o.partition("=")[0].strip() for o in overrides}
  both = sorted(keys & {c.partition("=")[0] for combination in combinations for c in combination})
  if both:
    raise errors.BadValue(f"{', '.join(both)}: set by both --grid and --config; keep one")
  jobs, made = [], {}  # made: run folder -> the grid's values and seed that made it
  for task, mixer, combination, seed in itertools.product(tasks, mixers, combinations, seeds):
    settings = [f"train.seed={seed}", *overrides, *combination]
    phase, extra = ("pretrain", ["objective=denoise"]) if spt else ("", [])
    # --spt: each phase gets what it reads; from scratch, an spt.* setting is refused.
    mine = run_identity.for_phase(phase, settings) if spt else settings
    config = resolve_config(task, mixer, preset, [*mine, *extra])
    run_dir = default_run_dir(config, results_dir)
    if run_dir in made:
      raise errors.BadValue(_twice(made[run_dir], (combination, seed), run_dir))
    made[run_dir] = (combination, seed)
    jobs.append(_job(task, mixer, seed, preset, config, run_dir, mine, results_dir, data_dir,
                     phase))
    if spt:  # its fine-tune starts from the pretraining's folder, complete by then
      theirs = run_identity.for_phase("spt", settings)
      tune = resolve_config(task, mixer, preset, [*theirs, f"spt.init_from={run_dir}"])
      start.write(tune, start.of_pretraining(config.to_dict()))
      jobs.append(_job(task, mixer, seed, preset, tune, default_run_dir(tune, results_dir),
                       theirs, results_dir, data_dir, "spt", init_from=run_dir))
  return jobs


def _twice(first: tuple[list[str], int], second: tuple[list[str], int], run_dir: Path) -> str:
  """Why two planned jobs are one run: grid values that parse to the same setting (1e-3 and
  0.001, or a preset's own value and one it rounds to), or a seed named twice."""
  ours, theirs = ([i for i in a if i not in b] for a, b in ((first[0], second[0]),
                                                           (second[0], first[0])))
  if not ours:
    return f"--seeds names seed {second[1]} twice; name each seed once"
  return (f"--grid values {', '.join(ours)} and {', '.join(theirs)} make the same run "
          f"({run_dir}): two array tasks would race for its folder; keep one of them")


def _job(task: str, mixer: str, seed: int, preset: str, config, run_dir: Path,
         settings: Sequence[str], results_dir: Path, data_dir: Path | None, phase: str,
         init_from: Path | None = None) -> Job:
  """The job of one run: its `lra` words (`pretrain` for a pretraining run), state and data."""
  argv = ["pretrain" if phase == "pretrain" else "run", task, mixer, "--preset", preset,
          "--results-dir", str(results_dir)]
  if data_dir is not None:
    argv += ["--data-dir", str(data_dir)]
  if init_from is not None:
    argv += ["--init-from", str(init_from)]
  argv += [f"--config.{o}" for o in settings]
  hint = missing_data(config, data_dir)
  missing = hint and (f"no prepared data at "
                      f"{data_cache_dir(config, data_dir or default_data_dir())}: {hint}")
  return Job(task, mixer, seed, run_dir, run_state(run_dir), tuple(argv), config.model.mixer,
             missing, phase, init_from)


def run_jobs(jobs: Sequence[Job], python: str = sys.executable) -> list[Job]:
  """Runs the pending jobs one after another in fresh processes; returns the ones that failed.
  A fine-tune whose pretraining did not complete (failed, diverged, or stopped before its last
  step) is not started: it would be refused, so it counts as failed, with a line saying why."""
  failed, unfinished = [], {}  # unfinished: pretraining folder -> its state
  for job in jobs:
    if job.phase == "spt" and job.after in unfinished:
      print(f"lra sweep: not started: {job.command()}  [its pretraining {job.after} is "
            f"{unfinished[job.after]}]", file=sys.stderr, flush=True)
      failed.append(job)
      continue
    if job.pending:
      print(f"lra sweep: {job.command()}  [{job.state}]", file=sys.stderr, flush=True)
      if subprocess.run([python, "-m", "lra", *job.argv]).returncode != 0:
        failed.append(job)
    state = run_state(job.run_dir)
    if job.phase == "pretrain" and state != "complete":
      unfinished[job.run_dir] = state
  return failed


def add_parser(commands) -> None:
  parser = add_command(
      commands, "sweep", "every (task, mixer, seed) run: print, run or emit a Slurm array; "
      "complete runs are skipped, partial ones resume",
      description="Plans `lra run TASK MIXER --preset P --config.train.seed=S` for every task, "
      "mixer and seed, names the runs whose data is not prepared, then prints the pending "
      "commands (default), runs them one by one (--run), or writes a Slurm array job "
      "(--emit slurm). Any --config.KEY=VALUE applies to every run; --grid KEY=V1,V2 crosses a "
      "setting's values with the rest. --spt: each run is "
      "self-pretraining (`lra pretrain`) then its fine-tune (`lra run --init-from`).",
      epilog="On a cluster: lra sweep --tasks listops --mixers latte softmax --seeds 0 1 2 "
      "--data-dir /shared/lra --emit slurm --time 08:00:00 --sbatch=--gres=gpu:1, then "
      "sbatch lra_sweep.sbatch from the same folder.")
  parser.add_argument("--tasks", nargs="+", required=True, metavar="TASK",
                      help="tasks to run (lra list)")
  parser.add_argument("--mixers", nargs="+", required=True, metavar="MIXER", help=MIXER_HELP +
                      "; or a group: builtin (every mixer of the suite, `lra list`'s built-in "
                      "ones) or all (those and every mixer an installed package registers)")
  parser.add_argument("--seeds", nargs="+", type=int, default=[0], metavar="SEED",
                      help="one run per seed, each in its own _seedN folder (default 0)")
  parser.add_argument("--preset", default="paper", help="the preset of every run (default "
                      "paper)")
  parser.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                      help="a setting crossed with the rest: every run once per value, e.g. "
                      "--grid train.learning_rate=1e-3,5e-4 (repeatable: the product of all); each "
                      "run's folder names its values")
  parser.add_argument("--spt", action="store_true", help="self-pretraining: each (task, mixer, "
                      "seed) is `lra pretrain` then `lra run --init-from` its folder, for the "
                      "preset's SPT budget (spt.*)")
  parser.add_argument("--data-dir", type=Path, help="prepared data root the runs read (default "
                      "$LRA_DATA_DIR or ~/.cache/lra); on a cluster, a folder every node sees")
  parser.add_argument("--results-dir", type=Path,
                      help="where run folders go (default $LRA_RESULTS_DIR, else results/local "
                      "under the folder you run lra from)")
  parser.add_argument("--run", action="store_true", help="run the pending commands one by one, "
                      "here")
  parser.add_argument("--emit", choices=("commands", "slurm"), default="commands",
                      help="commands: print the pending `lra run` commands (default); slurm: "
                      "write an sbatch array script with one run per array task (--out)")
  parser.add_argument("--out", type=Path, default=Path("lra_sweep.sbatch"),
                      help="where --emit slurm writes the array job script (default "
                      "lra_sweep.sbatch)")
  parser.add_argument("--sbatch", action="append", default=[], metavar="OPTION",
                      help="extra #SBATCH line, e.g. --sbatch=--gres=gpu:1 (repeatable)")
  parser.add_argument("--time", default=DEFAULT_TIME, metavar="[D-]HH:MM:SS",
                      help=f"Slurm time limit of each array task (default {DEFAULT_TIME}); a run "
                      f"still going saves a checkpoint {STOP_BEFORE_LIMIT_S} s before it and "
                      "stops, and submitting the script again resumes it")
  parser.add_argument("--env-activate", type=Path, default=current_env_activate(),
                      metavar="PATH", help="script the array task sources first, e.g. "
                      ".venv/bin/activate (default: the virtual environment running this "
                      "command, if any; `none`: no line)")
  parser.set_defaults(handler=main)


def main(args: argparse.Namespace, overrides: Sequence[str]) -> int:
  """`lra sweep`: plans the runs, then prints, runs or emits them."""
  args.results_dir = args.results_dir or local_results()
  jobs = plan(args.tasks, args.mixers, args.seeds, preset=args.preset,
              results_dir=args.results_dir, data_dir=args.data_dir, overrides=overrides,
              spt=args.spt, grid=args.grid)
  pending = [j for j in jobs if j.pending]
  summary = ", ".join(f"{sum(j.state == s for j in jobs)} {s}"
                      for s in ("new", "partial", "complete", *STOPPED))
  print(f"lra sweep: {len(jobs)} runs ({summary})", file=sys.stderr)
  for job in jobs:
    if not job.pending:
      again = ("`lra clean` removes the failed and diverged runs" if job.state in STOPPED else
               "delete it")
      print(f"# skip {job.run_dir} ({job.state}; {again} to run again)", file=sys.stderr)
  for item in unused_overrides({j.mixer_key for j in jobs}, overrides):
    print(f"lra sweep: warning: --config.{item}: no mixer of this sweep reads it",
          file=sys.stderr)
  for job in pending:
    if job.data_missing:
      print(f"lra sweep: warning: {job.task} x {job.mixer} seed {job.seed} would stop at once: "
            f"{job.data_missing}", file=sys.stderr)
  if args.emit == "slurm":
    if not pending:
      print("lra sweep: nothing to run, no script written", file=sys.stderr)
      return 0
    activate = None if str(args.env_activate) == "none" else args.env_activate
    python = "python" if activate else sys.executable
    if args.spt:
      code = _emit_spt(jobs, args, python, activate)
      print("\n".join(cost_lines(jobs, overrides, args.results_dir)))
      return code
    args.out.write_text(slurm_script(jobs, args.sbatch, python, time=args.time,
                                     env_activate=activate))
    print(f"wrote {args.out}: sbatch {args.out}  ({len(pending)} array tasks)")
    print("\n".join(cost_lines(pending, overrides, args.results_dir)))
    return 0
  if args.run:
    failed = run_jobs(jobs)
    for job in failed:
      print(f"lra sweep: failed: {job.command()}", file=sys.stderr)
    print("\n".join(summary_lines(jobs)))
    print("lra sweep: done; `lra table` rebuilds the tables"
          + ("; `lra clean` removes the failed and diverged runs" if any(
              run_state(j.run_dir) in STOPPED for j in jobs) else ""), file=sys.stderr)
    return 1 if failed else 0
  for job in pending:
    print(job.command() + ("  # resumes" if job.state == "partial" else ""))
  return 0


def summary_lines(jobs: Sequence[Job]) -> list[str]:
  """Where each run of the sweep stands now, one line each under a count by state: its score
  when complete, else its state as `lra status` words it (and the command that resumes it)."""
  from lra.report import run_summary  # pylint: disable=import-outside-toplevel
  lines, counts = [], {}
  for job in jobs:
    state = run_state(job.run_dir)
    counts[state] = counts.get(state, 0) + 1
    try:
      final = json.loads((job.run_dir / "final.json").read_text())
    except (OSError, ValueError):
      final = {}
    if final.get("status") == "complete":
      detail = run_summary.result_lines(final)[1].strip()
    elif final:
      detail = run_summary.state_text(final, job.run_dir)
    else:
      detail = "not started"
    lines.append(f"  {state:<9} {job.task} x {job.mixer} {job.run_dir.name}: {detail}")
  head = f"lra sweep: {len(jobs)} runs: " + ", ".join(f"{n} {s}" for s, n in counts.items())
  return [head, *lines]


def cost_lines(jobs: Sequence[Job], overrides: Sequence[str], results_dir: Path) -> list[str]:
  """Each array task's run and what it costs where the dry run knows a speed of its config
  (lra.report.dry_run.costs: runs, bench records, the ledger), one line each."""
  from lra.report import dry_run  # pylint: disable=import-outside-toplevel
  from lra.runs.command import run_config  # pylint: disable=import-outside-toplevel
  lines = ["cost of each array task, as `lra run ... --dry-run` knows it:"]
  for index, job in enumerate(jobs):
    known = dry_run.costs(run_config(job.argv), overrides, results_dir)[1:-1]
    # "DEVICE: COST, RATE steps/s: SOURCE" -> "DEVICE: COST, RATE steps/s"
    cost = "; ".join(": ".join(line.strip().split(": ")[:2]) for line in known)
    lines.append(f"  [{index}] {job.task} x {job.mixer} {job.run_dir.name}: "
                 + (cost or "no measured speed of this config (`lra bench --epoch` times one)"))
  return lines


def _emit_spt(jobs: Sequence[Job], args: argparse.Namespace, python: str,
              activate: Path | None) -> int:
  """Two array scripts, pretraining and fine-tuning, task i of the second for the run of task i
  of the first (every pair listed, so the indices agree: a complete run's task ends at once), and
  a script that submits them, the second with --dependency=aftercorr on the first: fine-tune i
  starts when pretraining i has ended well, and never without it."""
  stem = args.out.with_suffix("")
  scripts = {}
  for phase in ("pretrain", "spt"):
    every = [dataclasses.replace(j, state="partial") for j in jobs if j.phase == phase]
    path = stem.with_name(f"{stem.name}.{'finetune' if phase == 'spt' else phase}.sbatch")
    path.write_text(slurm_script(every, args.sbatch, python, time=args.time,
                                 env_activate=activate))
    scripts[phase] = path
  args.out.write_text(spt_submit_script(scripts["pretrain"], scripts["spt"]))
  count = sum(j.phase == "pretrain" for j in jobs)
  print(f"wrote {scripts['pretrain']}, {scripts['spt']} ({count} array tasks each) and "
        f"{args.out}: bash {args.out}")
  return 0
