"""Estimates the GPU cost of the ledger's rows that no GPU has timed yet, and says how.

  python tools/ledger_costs.py            # prints the estimates; --write puts them in the ledger

The paper ListOps step is bound by memory traffic (docs/accelerator_check.md), so a row's step time
is estimated as XLA's bytes accessed per train step (the cost analysis of its compiled step, here
on the CPU, whose fusions differ from a GPU's) over the bandwidth the measured Latte ListOps paper
step achieved on the H200 (its bytes times its 58.5 steps/s). Softmax's measured paper row checks
the method: its estimate is printed beside its measurement. An H100 (3.35 TB/s of HBM3 against the
H200's 4.8 TB/s of HBM3e) gets the H200 figure times 3.35 / 4.8. Evaluations are estimated as
forward passes at a third of a train step's time per example.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import step_probe  # noqa: E402  pylint: disable=wrong-import-position

REPO = Path(__file__).resolve().parents[1]
H100_OVER_H200 = 3.35 / 4.8  # HBM bandwidth, TB/s: the step is memory-bound
CALIBRATION = "listops-latte-paper-seed0"  # the row measured on the H200


def step_costs(rows: list[dict]) -> dict[str, dict]:
  """XLA's costs of each distinct row's train step, by row id (seeds share their program)."""
  from lra.runs.command import run_config
  from lra.report import ledger
  from lra.tasks.contract.spec import TaskSpec
  done: dict[str, dict] = {}
  by_program: dict[str, dict] = {}
  for row in rows:
    config = run_config(ledger.run_args(row))
    program = json.dumps({**config.to_dict(), "train": {**config.train.to_dict(), "seed": 0}},
                         sort_keys=True)
    if program not in by_program:
      by_program[program] = step_probe.abstract_step_cost(config, TaskSpec(**row["spec"]))
      print(f"{row['id']}: {by_program[program]}", file=sys.stderr, flush=True)
    done[row["id"]] = {**by_program[program], "config": config}
  return done


def estimate(rows: list[dict], costs: dict[str, dict]) -> dict[str, dict]:
  """{row id: {"h200": {...}, "h100": {...}}} for every row, measured figures kept."""
  reference = next(r for r in rows if r["id"] == CALIBRATION)
  # XLA's bytes are the whole batch's at the task's length: calibrate on the speed measured so.
  h200 = reference["cost"]["h200"]
  rate = h200.get("fixed_padding_steps_per_s", h200["steps_per_s"])
  bandwidth = costs[CALIBRATION]["bytes_accessed"] * rate  # what that step achieved, bytes/s
  out = {}
  for row in rows:
    config, cost = costs[row["id"]]["config"], costs[row["id"]]
    h200 = dict(row["cost"].get("h200") or {})
    estimated = bandwidth / cost["bytes_accessed"]
    if "measured" not in h200.get("source", ""):
      h200 = {"steps_per_s": round(estimated, 1),
              "source": f"estimate: XLA's {cost['bytes_accessed'] / 1e9:.1f} GB per step at the "
                        f"{bandwidth / 1e12:.2f} TB/s the measured Latte ListOps step achieved"}
    h200["estimate_steps_per_s"] = round(estimated, 1)
    evals = config.train.num_steps // config.eval.every_steps
    eval_rows = row.get("eval_rows", 4000)
    h200["eval_s"] = round(evals * eval_rows / config.train.batch_size / h200["steps_per_s"] / 3)
    h100 = {"steps_per_s": round(h200["steps_per_s"] * H100_OVER_H200, 1),
            "eval_s": round(h200["eval_s"] / H100_OVER_H200),
            "source": "estimate: the H200 figure x 3.35/4.8 (HBM bandwidth)"}
    out[row["id"]] = {"h200": h200, "h100": h100}
  return out


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--write", action="store_true", help="write the costs into the ledger")
  parser.add_argument("--ledger", type=Path, default=REPO / "results" / "ledger.json")
  args = parser.parse_args(argv)
  ledger_doc = json.loads(args.ledger.read_text())
  rows = ledger_doc["rows"]
  estimates = estimate(rows, step_costs(rows))
  for row in rows:
    row["cost"] = estimates[row["id"]]
    h200 = row["cost"]["h200"]
    print(f"{row['id']}: H200 {h200['steps_per_s']} steps/s ({h200['source']}; estimate "
          f"{h200['estimate_steps_per_s']}), evaluations {h200['eval_s']} s")
  if args.write:
    args.ledger.write_text(json.dumps(ledger_doc, indent=1) + "\n")
    print(f"wrote {args.ledger}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
