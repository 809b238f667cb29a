"""`lra diff RUN_A RUN_B`: what differs between two runs."""
from __future__ import annotations

import argparse
from pathlib import Path

from lra.cli.common import add_command


def add_parser(commands) -> None:
  parser = add_command(commands, "diff", "what differs between two runs: config, data, code, "
                       "versions, device, scores")
  parser.add_argument("run_a", type=Path)
  parser.add_argument("run_b", type=Path)
  parser.set_defaults(handler=main)


def main(args: argparse.Namespace, overrides: list[str]) -> int:
  from lra.report import run_diff
  print(run_diff.format_diff(run_diff.diff_runs(args.run_a, args.run_b), args.run_a, args.run_b))
  return 0
