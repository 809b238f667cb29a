"""`lra eval RUN_DIR`: evaluate a run's saved checkpoint (best-validation or latest) on a split.

The model is rebuilt from the run's own config.json and the data from its cache, so the number
means what the run's numbers mean. Each evaluation is printed and appended to the run's
evals.jsonl with the checkpoint, step, split and provenance. `--predictions FILE` also saves the
predicted class of every example, for looking at what a model gets right, not only how often.
"""
from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax.training.train_state import TrainState
from jax.sharding import NamedSharding, PartitionSpec as P

from lra import errors
from lra.machine import memory
from lra.runs import best_params, checkpoints, run_identity, writers
from lra.training import train
from lra.runs.config_loading import default_data_dir, load_data
from lra.tasks.contract.batches import indexed_eval_batches
from lra.tasks.contract.cache import PreparedData

CHECKPOINTS = ("best", "last")
EVALS_FILE = "evals.jsonl"


def evaluate_run(run_dir: Path, *, checkpoint: str = "best", split: str | None = None,
                 data_dir: Path | None = None, predictions: Path | None = None) -> dict[str, Any]:
  """Restores a checkpoint of `run_dir` and evaluates it on `split`; returns the record.

  Args:
    run_dir: a run directory (config.json and checkpoints/).
    checkpoint: "best" (the best validation step, checkpoints/best/) or "last" (the latest).
    split: "train", "val" or "test"; None: test, or val for a self-pretraining run (whose
      training never reads test: its best checkpoint is chosen on val, and no more is asked).
    data_dir: the prepared-data root (default $LRA_DATA_DIR or ~/.cache/lra).
    predictions: if given, the predicted class of every example of `split`, in the prepared
      split's order, is saved there ([N] int32, `np.save`).
  Raises:
    FileNotFoundError: no config.json, or no checkpoint of that kind.
    ValueError: an unknown checkpoint kind or split.
    CheckpointDamagedError: that checkpoint is damaged (named; nothing is moved or deleted).
    OutOfMemoryError: the eval step does not fit in the device's memory.
  """
  run_dir = Path(run_dir)
  if checkpoint not in CHECKPOINTS:
    raise errors.BadValue(f"--checkpoint must be one of {', '.join(CHECKPOINTS)}, got "
                          f"{checkpoint!r}")
  config_path = run_dir / "config.json"
  if not config_path.exists():
    raise errors.NotFound(f"{run_dir} is not a run directory (no config.json). Run folders are "
                          "results/runs/<task>/<mixer>/<run>/.")
  config = ml_collections.ConfigDict(run_identity.read_config(config_path))
  pretraining = run_identity.phase(config) == "pretrain"
  split = split or ("val" if pretraining else "test")
  if predictions is not None and pretraining:
    raise errors.BadValue(f"--predictions: {run_dir} is a self-pretraining run: it predicts "
                          "hidden token values, not classes; pass its fine-tune's folder, or "
                          "drop --predictions to score its denoising")
  data = load_data(config, data_dir or default_data_dir())
  if split not in data.meta["splits"]:
    raise errors.BadValue(f"--split must be one of {', '.join(data.meta['splits'])}, got {split!r}")
  s = train.setup(config, data.spec, training=False)
  ckpt = checkpoints.Checkpointer(run_dir, keep=config.checkpoint.keep)
  try:
    try:
      state, _, step = train.restore_or_init(s, data.spec, config.train.seed, ckpt,
                                             checkpoint=checkpoint)
    except checkpoints.CheckpointDamagedError as error:
      other = "last" if checkpoint == "best" else "best"
      raise checkpoints.CheckpointDamagedError(
          f"{error}; left in place. The {other} checkpoint may be intact: lra eval {run_dir} "
          f"--checkpoint {other}") from None
    carried = best_params.carried(run_dir) if checkpoint == "best" else None
    if carried is not None and carried[0] > step:  # from `lra unpack`, newer than any Orbax best
      state, step = best_params.apply(state, carried[1]), carried[0]
    if not step:
      from lra.runs.pack import resume_command  # pylint: disable=import-outside-toplevel
      made = resume_command(config.to_dict(), run_dir) or (
          f"lra {'pretrain' if pretraining else 'run'} {config.task} {config.model.mixer} "
          f"--preset {config.preset}")
      raise errors.NotFound(f"{run_dir} has no {checkpoint} checkpoint (checkpoints/ is not kept "
                            f"in git; rerun `{made}` to make one).")
    need = train.check_fits(config, s, state, data.spec, steps=("eval",))["eval"]
    try:
      metrics = train.evaluate(s, state, data, split, config.eval.batch_size)
      if predictions is not None:
        with open(predictions, "wb") as f:  # np.save(path) would add ".npy" to other names
          np.save(f, predict(s, state, data, split, config.eval.batch_size))
    except Exception as error:  # pylint: disable=broad-except
      oom = memory.as_out_of_memory(error, config, "eval", need)
      if oom is None:
        raise
      raise oom from None
  finally:
    ckpt.close()
  env = writers.environment()
  record = {"checkpoint": checkpoint, "step": step, "split": split,
            "objective": s.objective.name, **metrics,
            "evaluated_at": datetime.datetime.now(datetime.UTC).isoformat(
                timespec="seconds"),
            "device": env["device"], "git_sha": env["git_sha"], "versions": env["versions"]}
  with open(run_dir / EVALS_FILE, "a") as f:
    f.write(json.dumps(record, sort_keys=True) + "\n")
  return record


def predict(s: train.Setup, state: TrainState, data: PreparedData, split: str,
            batch_size: int) -> np.ndarray:
  """The predicted class (argmax of the logits) of every example of `split`: [N] int32."""
  classes = jax.jit(
      lambda variables, batch: jnp.argmax(
          s.model.apply(variables, batch, deterministic=True), axis=-1),
      out_shardings=NamedSharding(s.mesh, P()))  # every host gets the whole batch's classes
  arrays = data.split(split)
  predicted = np.full(len(arrays["label"]), -1, np.int32)
  rows = s.put.rows(batch_size)
  for indices, batch in indexed_eval_batches(arrays, data.spec, batch_size, rows, s.batching):
    predicted[indices] = jax.device_get(classes(train.model_variables(state),
                                                s.put(batch, batch_size)))[
        :len(indices)]
  return predicted
