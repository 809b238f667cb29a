"""`lra plot RUN...`: the curves of one or many runs in one PNG."""
from __future__ import annotations

import argparse
from pathlib import Path

from lra.cli.common import local_results, add_command


def add_parser(commands) -> None:
  parser = add_command(
      commands, "plot", "curves of one or many runs in one PNG: val and test accuracy, train and "
      "val loss against steps",
      epilog="e.g. lra plot results/local/runs/listops   or   lra plot 'results/runs/listops/*/"
      "laptop_seed0' -o laptop.png")
  parser.add_argument("runs", nargs="+", metavar="RUN", help="a run folder, a folder of runs "
                      "(any depth: results/local/runs), or a glob of either")
  parser.add_argument("-o", "--output", type=Path, metavar="FILE.png", help="default "
                      "RESULTS/plots/TASK_MIXER_RUN.png (RESULTS: $LRA_RESULTS_DIR or "
                      "results/local), each part the runs' values joined by + (printed, and said "
                      "when it replaced a file)")
  parser.set_defaults(handler=main)


def main(args: argparse.Namespace, overrides: list[str]) -> int:
  from lra.report import plot
  args.results_dir = local_results()  # where its plots go
  return plot.main(args)
