"""`lra table`: accuracy tables from the runs of a results folder, the published numbers beside."""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from lra import errors
from lra.cli.common import COMMITTED_RESULTS, local_results, add_command, committed_beside


def add_parser(commands) -> None:
  parser = add_command(
      commands, "table", "accuracy tables from the runs of a results folder",
      description="Writes RESULTS_DIR/tables/*.csv|md from RESULTS_DIR/runs/*, with the "
      "repository's committed runs (rows marked committed, never averaged with yours) and the "
      "published numbers beside; touches no README unless asked (--readme, --committed).")
  parser.add_argument("--results-dir", type=Path, help="the folder to read (default "
                      "results/local, your runs; with --committed or --check: results)")
  parser.add_argument("--readme", type=Path, help="also rewrite the generated block between the "
                      "lra-table markers of this file")
  parser.add_argument("--committed", action="store_true", help="the repository's own tables: "
                      "read results/, write results/tables/* and README.md's block")
  parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the tables "
                      "(and README block) differ from what the runs give (default: the "
                      "committed ones, as CI checks them)")
  parser.add_argument("--mine-only", action="store_true", help="leave out the repository's "
                      "committed rows that your tables show beside yours")
  parser.set_defaults(handler=main)


def main(args: argparse.Namespace, overrides: list[str]) -> int:
  from lra.report import results, tables
  committed = args.committed or (args.check and args.results_dir is None)
  results_dir = args.results_dir or (COMMITTED_RESULTS if committed else local_results())
  if args.results_dir is not None and not results_dir.is_dir():
    raise errors.NotFound(f"no runs under {results_dir}: the folder does not exist (`lra run "
                          f"TASK MIXER --results-dir {results_dir}` writes runs there)")
  readme = args.readme
  if readme is None and committed and (results_dir.parent / "README.md").exists():
    readme = results_dir.parent / "README.md"
  # The committed tables are the committed runs' alone; a user's show those runs beside theirs.
  beside = None if committed or args.mine_only else committed_beside(results_dir)
  shown = results_dir if committed else results_dir.resolve()  # yours: the folder whole
  what = (f"{shown / 'tables'}/" + (f" and {readme}'s block" if readme else "")
          + f" from {results.count_runs(results_dir)} complete run(s) in {shown / 'runs'}/"
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
