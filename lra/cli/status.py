"""`lra status`: which task x mixer x preset runs are complete, in progress or not run."""
from __future__ import annotations

import argparse
from pathlib import Path

from lra.cli.common import add_command, add_results_dir, committed_beside, local_results


def add_parser(commands) -> None:
  parser = add_command(
      commands, "status", "which task x mixer x preset runs are complete (score), in progress "
      "(step of steps) or not run: yours and the repository's committed ones")
  add_results_dir(parser)
  parser.add_argument("--presets", nargs="+", metavar="PRESET", help="the grids to show "
                      "(default: paper, and every preset with a run)")
  parser.add_argument("--mine-only", action="store_true", help="leave out the repository's "
                      "committed runs")
  parser.add_argument("--ledger", type=Path, help="the ledger of paper rows whose accelerator "
                      "costs the cells show (default: the repository's results/ledger.json)")
  parser.set_defaults(handler=main)


def main(args: argparse.Namespace, overrides: list[str]) -> int:
  from lra.report import status
  results_dir = args.results_dir or local_results()
  committed = None if args.mine_only else committed_beside(results_dir)
  return status.main(results_dir, committed, args.presets,
                     args.ledger or status.default_ledger())
