"""`lra pretrain TASK MIXER`: self-pretraining, masked denoising of the task's own training split
(Amos et al., ICLR 2024), as a run of its own; `lra run ... --init-from` fine-tunes from it."""
from __future__ import annotations

import argparse

from lra.cli import run
from lra.cli.common import add_command
from lra.runs import command

EPILOG = ("The run is `lra run` with --config.objective=denoise: the preset's model and "
          "optimizer for its SPT budget (spt.pretrain_steps), a share of each sequence's tokens "
          "hidden (spt.mask_ratio) and predicted (spt.loss); no label is read. Its folder is "
          "PRESET+pretrain_seedN; then `lra run TASK MIXER --preset P --init-from THAT_FOLDER`. "
          + command.OVERRIDES_HELP)


def add_parser(commands) -> None:
  parser = add_command(commands, "pretrain", "self-pretrain a mixer on a task's own inputs (SPT)",
                       epilog=EPILOG)
  command.add_run_arguments(parser, pretrain=True)
  parser.set_defaults(handler=main)


def main(args: argparse.Namespace, overrides: list[str]) -> int:
  return run.start(args.task, args.mixer, args.preset, args, [*overrides, "objective=denoise"],
                   stop_after_s=args.stop_after)
