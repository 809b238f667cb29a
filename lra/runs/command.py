"""The words of an `lra run` command: its options, its --config overrides, and the config they name.

One parser for them, used by the command line (lra.cli.run, and the bare `lra` demo) and by what
must know which run a written command makes (the ledger of paper rows, a dry run's costs).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ml_collections

from lra import errors

MIXER_HELP = ("a registered mixer (lra list), your own as path/to/file.py:ClassName or "
              "module.path:ClassName, or one an installed package registers (lra.mixers)")
OVERRIDES_HELP = ("Settings: --config.KEY=VALUE (or --config.KEY VALUE), any number, e.g. "
                  "--config.train.num_steps=100 --config.mixers.latte.num_latents=64; "
                  "`--dry-run` lists every KEY with its value and where it comes from.")


def split_overrides(argv: Sequence[str]) -> tuple[list[str], list[str]]:
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


def add_run_options(parser: Any, *,
                    preset_help: str, run_dir_help: str, preset_default: str | None,
                    dest_prefix: str = "") -> None:
  """The options a run takes, `lra run`'s and the bare demo's alike (only their help, the
  preset's default and, for the demo, the names they are stored under differ); `parser` is an
  ArgumentParser or one of its argument groups."""
  def option(flag: str, **kwargs) -> None:
    name = flag[2:].replace("-", "_")
    if dest_prefix:
      kwargs["dest"] = dest_prefix + name
      if "action" not in kwargs:
        kwargs.setdefault("metavar", name.upper())
    parser.add_argument(flag, **kwargs)

  option("--preset", default=preset_default, help=preset_help)
  option("--seed", type=int, help="the run's seed (train.seed, default 0); the run folder's name "
         "ends in _seedN")
  option("--data-dir", type=Path, help="prepared data root (default $LRA_DATA_DIR or "
         "~/.cache/lra)")
  option("--run-dir", type=Path, help=run_dir_help)
  option("--results-dir", type=Path, help="where run folders go (default $LRA_RESULTS_DIR, else "
         "results/local under the folder you run lra from, git-ignored; `results` is the "
         "repository's committed runs)")
  option("--dry-run", action="store_true", help="print the resolved config (each value with its "
         "source: default, preset or command line), the data cache and the run folder; train "
         "nothing")
  option("--quiet", action="store_true", help="no progress line")
  option("--distributed", action="store_true", help="multi-host: call "
         "jax.distributed.initialize() first (one process per host; also LRA_DISTRIBUTED=1)")


def add_run_arguments(parser: argparse.ArgumentParser, *, pretrain: bool = False) -> None:
  """`lra run`'s arguments: TASK MIXER, the run options, --stop-after, and a fine-tune's
  --init-from and --allow-partial (`pretrain`: `lra pretrain`'s, without those two)."""
  from lra.configs.common import CPU_PRESETS, PRESETS, PUBLISHED_PRESETS  # light: ml_collections
  parser.add_argument("task")
  parser.add_argument("mixer", help=MIXER_HELP)
  add_run_options(
      parser, preset_default="paper",
      preset_help=(f"{', '.join(PRESETS + CPU_PRESETS + PUBLISHED_PRESETS)} (default paper: the "
                   "Latte paper's settings, accelerator-sized; laptop: ListOps or Pathfinder on "
                   "a CPU; `lra list`)"),
      run_dir_help="default RESULTS_DIR/runs/TASK/MIXER/PRESET[+CHANGES]_seedN (`--dry-run` "
                   "prints it)")
  parser.add_argument("--stop-after", type=float, metavar="SECONDS", help="stop cleanly (a "
                      "checkpoint, status interrupted; the same command resumes) so as to end "
                      "within SECONDS of the command's start, e.g. a scheduler's time limit")
  if pretrain:
    return
  parser.add_argument("--init-from", type=Path, metavar="PRETRAIN_RUN_DIR", help="fine-tune: start "
                      "from this `lra pretrain` run's best checkpoint (its encoder; a fresh "
                      "classifier head) for the preset's SPT budget (spt.finetune_steps); the run "
                      "is named PRESET+spt")
  parser.add_argument("--allow-partial", action="store_true", help="with --init-from: accept a "
                      "pretraining run that has not finished (its best checkpoint so far)")


def spt_overrides(args: argparse.Namespace, overrides: Sequence[str]) -> list[str]:
  """The overrides with `lra run`'s --init-from and --allow-partial as spt.init_from and
  spt.allow_partial (the path as given, relative to where the command runs)."""
  init_from, partial = getattr(args, "init_from", None), getattr(args, "allow_partial", False)
  if partial and init_from is None:
    raise errors.BadValue("--allow-partial says which pretraining run may be unfinished: pass it "
                          "with --init-from PRETRAIN_RUN_DIR")
  if init_from is None:
    return list(overrides)
  return [*overrides, f"spt.init_from={init_from}", *(["spt.allow_partial=true"] if partial
                                                        else [])]


def seeded(seed: int | None, overrides: Sequence[str]) -> list[str]:
  """The overrides with --seed N as train.seed=N (a --config.train.seed that disagrees is
  refused: which one was meant?)."""
  if seed is None:
    return list(overrides)
  for item in overrides:
    key, _, value = item.partition("=")
    if key.strip() == "train.seed" and value.strip() != str(seed):
      raise errors.BadValue(f"--seed {seed} and --config.{item} disagree; pass one of them.")
  return [*overrides, f"train.seed={seed}"]


def parse_run(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
  """(`lra run`'s arguments, its --config overrides) from the words after `lra`, as the command
  line reads them; options before the task and `--preset=lra` forms included. `lra pretrain`'s
  words too: its arguments, and `objective=denoise` after its overrides (what the command adds).

  Raises:
    BadValue: the words are not `lra run|pretrain TASK MIXER ...` (with the parser's complaint).
  """
  rest, overrides = split_overrides(list(argv))
  verb = rest[0] if rest[:1] in (["run"], ["pretrain"]) else None
  parser = argparse.ArgumentParser(prog=f"lra {verb or 'run'}")
  add_run_arguments(parser, pretrain=verb == "pretrain")
  complaint, args = io.StringIO(), None
  if verb is not None:
    try:
      with contextlib.redirect_stderr(complaint):
        args = parser.parse_args(rest[1:])
    except SystemExit:
      pass
  if args is None:
    said = complaint.getvalue().strip().splitlines()
    raise errors.BadValue(f"expected `lra run TASK MIXER ...` (or `lra pretrain ...`), got "
                          f"`lra {shlex.join(argv)}`" + (f" ({said[-1]})" if said else ""))
  return args, [*overrides, *(["objective=denoise"] if verb == "pretrain" else [])]


def run_config(argv: Sequence[str]) -> ml_collections.ConfigDict:
  """The config `lra run TASK MIXER ...` (or `lra pretrain ...`) resolves for these words (after
  `lra`), --seed and both --config forms included, a fine-tune's start recorded as the command
  records it: for tools that must name the run a command makes (the ledger, the layout test's
  resume check)."""
  from lra.runs import start
  from lra.runs.config_loading import resolve_config
  args, overrides = parse_run(argv)
  config = resolve_config(args.task, args.mixer, args.preset,
                          spt_overrides(args, seeded(args.seed, overrides)))
  start.resolve(config, args.results_dir, args.run_dir)
  return config
