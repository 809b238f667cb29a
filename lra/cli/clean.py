"""`lra clean`: remove your failed and diverged runs, which `lra sweep` skips (the same command
would end them the same way), so that their commands run them again once the cause is mended."""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from lra import errors
from lra.cli.common import add_command, add_results_dir, local_results
from lra.report.run_summary import STOPPED


def add_parser(commands) -> None:
  parser = add_command(
      commands, "clean", "remove your failed and diverged runs, so that `lra run` and `lra "
      "sweep` run them again")
  add_results_dir(parser)
  parser.add_argument("--status", nargs="+", choices=STOPPED, default=list(STOPPED),
                      help="which runs to remove (default: both)")
  parser.add_argument("--dry-run", action="store_true", help="list them, remove nothing")
  parser.set_defaults(handler=main)


def stopped_runs(results_dir: Path, statuses: tuple[str, ...] = STOPPED) -> list[tuple[Path, dict]]:
  """(run folder, final.json) of every run under results_dir/runs/ that ended so, no process
  holding it (a live lock: a run that is being started again)."""
  from lra.runs import run_lock  # pylint: disable=import-outside-toplevel
  found = []
  for final_path in sorted(Path(results_dir).glob("runs/*/*/*/final.json")):
    try:
      final = json.loads(final_path.read_text())
    except (OSError, ValueError):
      continue
    run_dir = final_path.parent
    if final.get("status") in statuses and not run_lock.RunDirLock(run_dir, take=False).held():
      found.append((run_dir, final))
  return found


def main(args: argparse.Namespace, overrides: list[str]) -> int:
  if overrides:
    raise errors.BadValue("lra clean takes no --config settings.")
  from lra.report import results  # pylint: disable=import-outside-toplevel
  results_dir = args.results_dir or local_results()
  committed = results.committed_results_dir()
  if committed is not None and Path(results_dir).resolve() == committed.resolve():
    raise errors.BadValue(f"{results_dir} holds the repository's committed runs: lra clean removes "
                          "only your own (git rm the folders you mean to remove from it).")
  runs = stopped_runs(results_dir, tuple(args.status))
  if not runs:
    print(f"lra clean: no {' or '.join(args.status)} runs in {Path(results_dir) / 'runs'}/")
    return 0
  for run_dir, final in runs:
    why = f": {final['stop_reason']}" if final.get("stop_reason") else ""
    print(f"{'would remove' if args.dry_run else 'removed'} {run_dir} ({final['status']} at step "
          f"{final.get('step', 0):,}{why})")
    if not args.dry_run:
      shutil.rmtree(run_dir)
      for parent in (run_dir.parent, run_dir.parent.parent):  # runs/<task>/<mixer>/, if empty
        if parent.is_dir() and not any(parent.iterdir()):
          parent.rmdir()
  print(f"lra clean: {len(runs)} run(s) {'to remove' if args.dry_run else 'removed'}; their "
        "commands (lra run, lra sweep) run them again from step 0", file=sys.stderr)
  return 0
