"""What several commands share: where runs go by default, the committed runs shown beside a user's,
a command's parser opening with its own one-line help, and a run's result and exit code."""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

# A user's runs and tables go to local_results() by default (git-ignored), apart from the
# repository's committed results/runs/ and results/tables/, which `--results-dir results` (runs)
# and `lra table --committed` (tables, README block) write on purpose.
RESULTS_ENV = "LRA_RESULTS_DIR"
COMMITTED_RESULTS = Path("results")


def local_results() -> Path:
  """Where your runs and tables go unless --results-dir says: $LRA_RESULTS_DIR, else
  results/local/ under the folder `lra` runs from. Every command says the folder it used."""
  return Path(os.environ.get(RESULTS_ENV) or "results/local")


def add_command(commands: Any, name: str, help: str, **kwargs: Any) -> argparse.ArgumentParser:
  """A subcommand's parser (`commands`: what add_subparsers returned): `lra NAME --help` opens with
  the line `lra --help` lists for it, unless the command has a description of its own."""
  kwargs.setdefault("description", help[0].upper() + help[1:] + ".")
  return commands.add_parser(name, help=help, **kwargs)


def add_results_dir(parser: argparse.ArgumentParser) -> None:
  """--results-dir for the commands that read one's own runs (status, clean)."""
  parser.add_argument("--results-dir", type=Path, help="your runs' folder (default "
                      "$LRA_RESULTS_DIR, else results/local under the folder you run lra from)")


def committed_beside(results_dir: Path) -> Path | None:
  """The repository's committed results, shown beside the runs of another folder (None when
  `results_dir` is that folder, or this is not a checkout)."""
  from lra.report import results
  committed = results.committed_results_dir()
  if committed is None or Path(results_dir).resolve() == committed.resolve():
    return None
  return committed


def exit_code(result: dict) -> int:
  """0 complete, 130 interrupted (saved; run again to resume), 1 otherwise (diverged)."""
  return {"complete": 0, "interrupted": 130}.get(result["status"], 1)


def print_result(result: dict) -> None:
  from lra.report import run_summary  # light: no JAX
  print("\n".join(run_summary.result_lines(result)))
