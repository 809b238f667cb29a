"""`lra eval RUN_DIR`: evaluate a run's saved checkpoint (best-validation or latest) on a split.

The model is rebuilt from the run's own config.json and the data from its cache, so the number
means what the run's numbers mean. Each evaluation is printed and appended to the run's
evals.jsonl with the checkpoint, step, split and provenance.
"""
from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import ml_collections

from lra import checkpoints, train, writers
from lra.run import default_data_dir, load_data

CHECKPOINTS = ("best", "last")
EVALS_FILE = "evals.jsonl"


def evaluate_run(run_dir: Path, *, checkpoint: str = "best", split: str = "test",
                 data_dir: Path | None = None) -> dict[str, Any]:
  """Restores a checkpoint of `run_dir` and evaluates it on `split`; returns the record.

  Args:
    run_dir: a run directory (config.json and checkpoints/).
    checkpoint: "best" (the best validation step, checkpoints/best/) or "last" (the latest).
    split: "train", "val" or "test".
    data_dir: the prepared-data root (default $LRA_DATA_DIR or ~/.cache/lra).
  Raises:
    FileNotFoundError: no config.json, or no checkpoint of that kind.
    ValueError: an unknown checkpoint kind or split.
  """
  run_dir = Path(run_dir)
  if checkpoint not in CHECKPOINTS:
    raise ValueError(f"--checkpoint must be one of {', '.join(CHECKPOINTS)}, got {checkpoint!r}")
  config_path = run_dir / "config.json"
  if not config_path.exists():
    raise FileNotFoundError(f"{run_dir} is not a run directory (no config.json). Run folders are "
                            "results/runs/<task>/<mixer>/<run>/.")
  config = ml_collections.ConfigDict(json.loads(config_path.read_text()))
  data = load_data(config, data_dir or default_data_dir())
  if split not in data.meta["splits"]:
    raise ValueError(f"--split must be one of {', '.join(data.meta['splits'])}, got {split!r}")
  s = train.setup(config, data.spec)
  ckpt = checkpoints.Checkpointer(run_dir, keep=config.checkpoint.keep)
  try:
    state, _, step = train.restore_or_init(s, data.spec, config.train.seed, ckpt,
                                           best=checkpoint == "best")
    if not step:
      raise FileNotFoundError(
          f"{run_dir} has no {checkpoint} checkpoint (checkpoints/ is not kept in git; rerun "
          f"`lra run {config.task} {config.model.mixer} --preset {config.preset}` to make one).")
    metrics = train.evaluate(s, state, data, split, config.eval.batch_size)
  finally:
    ckpt.close()
  env = writers.environment()
  record = {"checkpoint": checkpoint, "step": step, "split": split, **metrics,
            "evaluated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"),
            "device": env["device"], "git_sha": env["git_sha"], "versions": env["versions"]}
  with open(run_dir / EVALS_FILE, "a") as f:
    f.write(json.dumps(record, sort_keys=True) + "\n")
  return record
