"""The ledger of paper rows: which rows lent GPUs reproduce, in which order, at what cost.

`results/ledger.json` lists the rows in order. Each has its `lra run` command, the run folder it
fills (`runs/<task>/<mixer>/<name>` under the results folder), its steps, the task spec its data
gives (for compiling before the data is ready) and its cost per GPU kind, each with its source
(measured, or estimated and how). A row is finished when its committed run folder's final.json
says `complete`; until then its newest state travels as that folder's `run.pack` (or its parts),
which tools/accelerator_rows.py unpacks, advances and packs again. A row whose final.json says
`diverged` or `failed` is stopped: loans report it and skip it (rerunning it repeats the same
steps from the same state) until someone looks at it and removes that final.json to retry it.
`python -m lra.report.ledger` rewrites the ledger's table in docs/accelerators.md (`--check`: exit
1 if it differs).
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from lra import errors
from lra.report import run_summary
from lra.report.table_rules import decimals
from lra.runs import command

LEDGER = Path("results/ledger.json")
ARCHIVE = "run.pack"  # a row's archive in its run folder (run.pack.1, .2, ... when split)
DOCS = Path("docs/accelerators.md")
START, END = "<!-- lra-ledger:start -->", "<!-- lra-ledger:end -->"
KINDS = ("h200", "h100")
# Minutes of training one loan gives a row: 15 minutes of device time less the machine's start,
# installing, the data and compiling one program, and packing (docs/accelerators.md).
TRAINING_MIN_PER_LOAN = 8.0
# Every other program a row compiles on a fresh machine (a batch length of per-batch or sorted
# padding, in training and in evaluation) takes its compile out of a loan too, an upper bound
# where tools/accelerator_rows.py compiles them while the data is made: seconds each, until a step
# probe has timed the row's (cost.<kind>.compile_s_per_program; the probe records its programs and
# their compile). The H200 loans' compiles with autotuning took 5-20 s per shape: the middle.
COMPILE_S_PER_PROGRAM = 10.0
STOPPED = run_summary.STOPPED  # a row whose run ended so is reported and skipped, not retried


def load(path: Path = LEDGER) -> list[dict[str, Any]]:
  """The ledger's rows, checked.

  Raises:
    ValueError: a row lacks a field or its command is not `lra run TASK MIXER ...` (names it).
  """
  rows = json.loads(Path(path).read_text())["rows"]
  for index, row in enumerate(rows):
    missing = {"id", "command", "run", "steps", "spec", "cost", "why"} - set(row)
    if missing:
      raise errors.BadValue(f"{path}: row {index + 1} lacks {', '.join(sorted(missing))}")
    try:
      task = parsed(row).task
    except ValueError as error:
      raise errors.BadValue(f"{path}: row {row['id']}: {error}") from None
    if not row["run"].startswith(f"runs/{task}/"):
      raise errors.BadValue(f"{path}: row {row['id']}: its run folder {row['run']} is not under "
                            f"runs/{task}/")
  return rows


def parsed(row: dict[str, Any]) -> argparse.Namespace:
  """The row's command as `lra run` reads it (one parser: lra.runs.command): .task, .mixer,
  .preset (`--preset=lra` and options before the task included).

  Raises:
    ValueError: the command is not `lra run TASK MIXER ...` (with the parser's complaint).
  """
  words = shlex.split(row["command"])
  if words[:1] != ["lra"]:
    raise errors.BadValue(f"its command must be `lra run TASK MIXER ...`, not `{row['command']}`")
  args, _ = command.parse_run(words[1:])
  return args


def run_args(row: dict[str, Any]) -> list[str]:
  """The row's command after `lra` (what lra.cli.main takes)."""
  return shlex.split(row["command"])[1:]


def final(row: dict[str, Any], results_dir: Path) -> dict[str, Any] | None:
  path = Path(results_dir) / row["run"] / "final.json"
  return json.loads(path.read_text()) if path.exists() else None


def archive(row: dict[str, Any], results_dir: Path) -> Path:
  return Path(results_dir) / row["run"] / ARCHIVE


def first_unfinished(rows: list[dict[str, Any]], results_dir: Path) -> dict[str, Any] | None:
  """The first row neither complete nor stopped (`stopped` names those, for the report)."""
  return next((row for row in rows if (final(row, results_dir) or {}).get("status")
               not in ("complete", *STOPPED)), None)


def stopped(rows: list[dict[str, Any]], results_dir: Path) -> list[dict[str, Any]]:
  """The rows whose run ended diverged or failed: skipped by `first_unfinished`."""
  return [row for row in rows if (final(row, results_dir) or {}).get("status") in STOPPED]


def minutes(row: dict[str, Any], kind: str) -> float | None:
  """Training minutes of the whole row on `kind` (evaluations included where the row says)."""
  cost = row["cost"].get(kind) or {}
  rate = cost.get("steps_per_s")
  if not rate:
    return None
  return (row["steps"] / rate + cost.get("eval_s", 0.0)) / 60.0


def programs(row: dict[str, Any]) -> int:
  """The programs a row's run compiles: one per batch length it can meet, in training and in
  evaluation (one each at fixed padding)."""
  from lra.tasks.contract.batches import Batching  # pylint: disable=import-outside-toplevel
  config = command.run_config(run_args(row))
  return 2 * Batching.of(config).programs(row["spec"]["seq_len"])


def loan_minutes(row: dict[str, Any], kind: str) -> float:
  """Training minutes one loan gives this row: TRAINING_MIN_PER_LOAN less the compiles of its
  programs beyond the first (each loan starts a fresh machine, so each compiles them again)."""
  per_program = (row["cost"].get(kind) or {}).get("compile_s_per_program") or COMPILE_S_PER_PROGRAM
  return max(TRAINING_MIN_PER_LOAN - (programs(row) - 1) * per_program / 60.0, 1.0)


def status(row: dict[str, Any], results_dir: Path) -> str:
  result = final(row, results_dir)
  if result is None:
    return "not started"
  if result.get("status") == "complete":
    test = result.get("test_accuracy")
    return "complete" + (f": {decimals(100 * test)}% test at the best val step" if test is not None
                         else "")
  return run_summary.state_text(result)


def cell_costs(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], str]:
  """{(task, mixer, preset): "~22 min on an H200 (measured)"}: what `lra status` appends to the
  cell a row will fill (the first row of a cell when several seeds share it)."""
  costs = {}
  for row in rows:
    args = parsed(row)
    h200 = minutes(row, "h200")
    if h200 is not None:
      measured = row["cost"]["h200"]["source"].startswith("measured")
      costs.setdefault((args.task, args.mixer, args.preset), f"~{_duration(h200)} on an H200 "
                       f"({'measured' if measured else 'estimate'})")
  return costs


def markdown(rows: list[dict[str, Any]]) -> str:
  """The ledger as the table docs/accelerators.md shows (without progress: `--status` has it)."""
  lines = ["| # | row | command | steps | H200 | H100 | 15-min sessions (H200) | source |",
           "|---:|---|---|---:|---:|---:|---:|---|"]
  for index, row in enumerate(rows, start=1):
    h200, h100 = minutes(row, "h200"), minutes(row, "h100")
    loans = "-" if h200 is None else f"{h200 / loan_minutes(row, 'h200'):.1f}"
    sources = "; ".join(f"{kind.upper()}: {row['cost'][kind]['source']}" for kind in KINDS
                        if row["cost"].get(kind))
    lines.append(f"| {index} | {row['id']}: {row['why']} | `{row['command']}` | "
                 f"{row['steps']:,} | {_duration(h200)} | {_duration(h100)} | {loans} | "
                 f"{sources} |")
  return "\n".join(lines)


def _duration(minutes_: float | None) -> str:
  if minutes_ is None:
    return "-"
  return f"{minutes_:.0f} min" if minutes_ < 90 else f"{minutes_ / 60:.1f} h"


def docs_block(rows: list[dict[str, Any]]) -> str:
  return (f"{START}\n<!-- Generated by `python -m lra.report.ledger` from results/ledger.json; "
          f"do not edit between these markers. -->\n\n{markdown(rows)}\n\n{END}")


def splice(text: str, block: str, path: Path) -> str:
  start, end = text.find(START), text.find(END)
  if start < 0 or end < start:
    raise errors.BadValue(f"{path}: expected the markers {START} and {END} around the ledger table")
  return text[:start] + block + text[end + len(END):]


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m lra.report.ledger",
                                   description=__doc__.splitlines()[0])
  parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the table "
                      "in docs/accelerators.md differs from the ledger")
  parser.add_argument("--status", action="store_true", help="print each row's progress in the "
                      "results folder instead")
  parser.add_argument("--results-dir", type=Path, default=Path("results"))
  args = parser.parse_args(argv)
  rows = load(args.results_dir / "ledger.json")
  if args.status:
    for index, row in enumerate(rows, start=1):
      print(f"{index}. {row['id']}: {status(row, args.results_dir)}")
    return 0
  text = DOCS.read_text()
  wanted = splice(text, docs_block(rows), DOCS)
  if args.check:
    if wanted != text:
      print(f"{DOCS}: the ledger table differs from {args.results_dir / 'ledger.json'}; run "
            "`python -m lra.report.ledger` and commit", file=sys.stderr)
      return 1
    return 0
  if wanted != text:
    DOCS.write_text(wanted)
    print(f"wrote {DOCS}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
