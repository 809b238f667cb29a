"""`lra run TASK MIXER`: train and evaluate one pair (with --dry-run: say what that would do)."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from lra.cli.common import local_results, add_command, exit_code, print_result
from lra.runs import command


def add_parser(commands) -> None:
  parser = add_command(commands, "run", "train and evaluate one task with one mixer",
                       epilog=command.OVERRIDES_HELP)
  command.add_run_arguments(parser)
  parser.set_defaults(handler=main)


def main(args: argparse.Namespace, overrides: list[str]) -> int:
  return start(args.task, args.mixer, args.preset, args, command.spt_overrides(args, overrides),
               stop_after_s=args.stop_after)


def start(task: str, mixer: str, preset: str, options: argparse.Namespace,
          overrides: Sequence[str], *, stop_after_s: float | None = None,
          on_result=lambda result: None) -> int:
  """One run (`lra run`'s or the demo's): `options` holds the run options (lra.runs.command)."""
  overrides = command.seeded(options.seed, overrides)
  results_dir = options.results_dir or local_results()
  from lra.runs import start as fine_tune_start
  from lra.runs.config_loading import reference_config, resolve_config
  # Once: everything below reads this config (a fine-tune's start recorded in it) and preset.
  config = resolve_config(task, mixer, preset, overrides)
  reference = reference_config(config.to_dict()).to_dict()
  run_dir = fine_tune_start.resolve(config, results_dir, options.run_dir) or options.run_dir
  _warn_unused_overrides(config.model.mixer, overrides)
  if options.dry_run:
    from lra.report import dry_run
    print(dry_run.describe(config, overrides, reference, results_dir=results_dir,
                           run_dir=run_dir, data_dir=options.data_dir))
    return 0
  from lra import run  # deferred: `lra --help` should not wait for JAX
  from lra.machine import distributed
  distributed.initialize(options.distributed)  # before anything touches a device
  result = run.run_config(config, data_dir=options.data_dir, run_dir=run_dir,
                          results_dir=results_dir, progress=not options.quiet,
                          stop_after_s=stop_after_s, reference=reference)
  print_result(result)
  on_result(result)
  return exit_code(result)


def _warn_unused_overrides(used: str, overrides: list[str]) -> None:
  """One line per --config.mixers.OTHER.KEY: accepted (the key exists) but read by no part of
  this run (whose mixer is `used`), which is almost always a slip."""
  from lra.runs.config_loading import unused_overrides
  for item in unused_overrides([used], overrides):
    other = item.split(".")[1]
    print(f"lra: warning: --config.{item} sets a {other} setting, but this run's mixer is "
          f"{used}: it changes nothing (this run's own: --config.mixers.{used}.KEY=VALUE)",
          file=sys.stderr)
