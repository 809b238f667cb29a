"""`lra eval RUN_DIR`: a run's saved checkpoint on a split, printed and kept in its evals.jsonl."""
from __future__ import annotations

import argparse
from pathlib import Path

from lra.cli.common import add_command
from lra.report.table_rules import decimals


def add_parser(commands) -> None:
  parser = add_command(commands, "eval", "evaluate a run's saved checkpoint on a split (printed "
                       "and appended to the run's evals.jsonl)")
  parser.add_argument("run_dir", type=Path)
  parser.add_argument("--checkpoint", default="best", choices=("best", "last"),
                      help="best validation step (default) or the latest checkpoint")
  parser.add_argument("--split", help="train, val or test (default: test; val for a "
                      "self-pretraining run, which never reads test)")
  parser.add_argument("--data-dir", type=Path)
  parser.add_argument("--predictions", type=Path, metavar="FILE.npy",
                      help="also save the predicted class of every example of the split, in "
                      "the prepared split's order ([N] int32)")
  parser.set_defaults(handler=main)


def main(args: argparse.Namespace, overrides: list[str]) -> int:
  from lra.training import evaluation
  record = evaluation.evaluate_run(args.run_dir, checkpoint=args.checkpoint, split=args.split,
                                   data_dir=args.data_dir, predictions=args.predictions)
  split = record["split"]
  print(f"{args.run_dir}: {record['checkpoint']} checkpoint (step {record['step']}) on "
        f"{split}: accuracy {decimals(100 * record[split + '/accuracy'])}%, loss "
        f"{record[split + '/loss']:.4f} over {record[split + '/num_examples']} "
        f"{'hidden tokens' if record.get('objective') == 'denoise' else 'examples'}"
        + (f"; lit pixels alone (not background) {decimals(100 * record[lit])}%" if (
            lit := f"{split}/lit_accuracy") in record else "")
        + f"; appended to {args.run_dir / evaluation.EVALS_FILE}")
  if args.predictions:
    print(f"predicted classes: {args.predictions}")
  return 0
