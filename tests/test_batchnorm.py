"""model.norm=batch (S5's LRA runs): BatchNorm trains on each batch's statistics over batch and
time (pads included), evaluates on running ones, and its statistics survive a resume."""
import json
import shutil

import jax
import numpy as np
import pytest

from lra import errors, run
from lra.training import optim, train
from lra.runs.config_loading import resolve_config
from lra.models.build import build_model
from lra.tasks import TaskSpec
from lra.runs.writers import read_metrics

SPEC = TaskSpec(vocab_size=20, seq_len=24, num_classes=10)


def _s5_published(**model):
  config = resolve_config("listops", "s5", "published")
  with config.unlocked():
    config.model.num_layers, config.model.dim, config.model.dropout = 1, 16, 0.0
    config.mixers.s5.state_size, config.mixers.s5.blocks = 8, 2
    config.model.update(model)
  return config


def _batch(rows=4):
  rng = np.random.default_rng(0)
  mask = np.arange(SPEC.seq_len)[None] < rng.integers(5, SPEC.seq_len, (rows, 1))
  return {"inputs": np.where(mask, rng.integers(1, 20, mask.shape), 0).astype(np.int32),
          "mask": mask, "label": rng.integers(0, 10, rows).astype(np.int32),
          "weight": np.ones(rows, np.float32)}


def test_train_step_normalises_by_the_batch_and_updates_running_statistics():
  """Running mean/var after one step = m * (0, 1) + (1 - m) * the block input's statistics over
  batch and time, pads included (the first block reads the embeddings: no positions, no
  dropout). Elementwise float32 arithmetic: 1e-5."""
  config = _s5_published()
  assert (config.model.norm, config.model.bn_momentum) == ("batch", 0.95)
  model = build_model(config, SPEC)
  batch = _batch()
  variables = model.init(jax.random.PRNGKey(0), {k: batch[k][:1] for k in ("inputs", "mask")},
                         deterministic=True)
  embedded = np.asarray(variables["params"]["encoder"]["embed"]["embedding"])[batch["inputs"]]
  state = train.create_state(model, variables, optim.make_optimizer(config.train))
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("data",))
  step, _ = train.make_steps(model, mesh, dropout_seed=0)
  state, _ = step(state, [batch])  # one micro-batch
  stats = state.batch_stats["encoder"]["block_0"]["mixer_norm"]
  np.testing.assert_allclose(stats["mean"], 0.05 * embedded.mean((0, 1)), atol=1e-5)
  np.testing.assert_allclose(stats["var"], 0.95 + 0.05 * embedded.var((0, 1)), atol=1e-5)


def test_evaluation_uses_running_statistics_so_an_example_scores_alone_as_in_a_batch():
  """Training-mode BatchNorm would make each example's logits depend on its batch-mates."""
  config = _s5_published()
  model = build_model(config, SPEC)
  batch = _batch()
  variables = model.init(jax.random.PRNGKey(1), {k: batch[k][:1] for k in ("inputs", "mask")},
                         deterministic=True)
  inputs = {k: batch[k] for k in ("inputs", "mask")}
  together = model.apply(variables, inputs, deterministic=True)
  alone = model.apply(variables, {k: v[:1] for k, v in inputs.items()}, deterministic=True)
  np.testing.assert_allclose(alone[0], together[0], atol=1e-5)
  trained, _ = model.apply(variables, inputs, deterministic=False, mutable=["batch_stats"],
                           rngs={"dropout": jax.random.PRNGKey(0)})
  trained_alone, _ = model.apply(variables, {k: v[:1] for k, v in inputs.items()},
                                 deterministic=False, mutable=["batch_stats"],
                                 rngs={"dropout": jax.random.PRNGKey(0)})
  assert np.abs(np.asarray(trained_alone[0]) - np.asarray(trained[0])).max() > 1e-3


@pytest.mark.parametrize("padding, micro, bucketing", [
    ("fixed", 2, False), ("sorted", 1, False), ("sorted", 2, False), ("batch", 1, False),
    ("batch", 1, True)])
def test_every_batching_but_whole_fixed_batches_is_refused_with_batch_norm(padding, micro,
                                                                           bucketing):
  """BatchNorm's statistics span the batch's rows and positions, pads included: a micro-batch, a
  batch cut to its own length (sorted or per-batch padding) or one drawn from a length bucket
  would be normalised by other numbers. One rule, one line with the settings that fix it; an
  evaluation (lra eval) trains nothing and is not refused."""
  config = _s5_published()
  assert (config.data.padding, config.data.bucketing) == ("fixed", False)  # the preset keeps it
  with config.unlocked():
    config.train.grad_accum_steps, config.data.padding = micro, padding
    config.data.bucketing = bucketing
  with pytest.raises(errors.BadValue, match="model.norm=batch") as refused:
    train.setup(config, SPEC)
  assert "\n" not in str(refused.value)
  assert ("--config.train.grad_accum_steps=1 --config.data.padding=fixed "
          "--config.data.bucketing=false") in str(refused.value)
  assert train.setup(config, SPEC, training=False).model is not None


def test_a_batch_norm_run_resumes_to_the_same_losses(tmp_path):
  """The statistics are part of the checkpoint: had the resume started them afresh, the step-4
  evaluation losses (running statistics) would differ."""
  overrides = ["train.num_steps=4", "eval.every_steps=2", "train.log_every_steps=1",
               "checkpoint.every_steps=2", "model.norm=batch", "model.block=s5",
               "mixers.s5.activation=none"]
  kwargs = dict(preset="smoke", data_dir=tmp_path / "data", results_dir=tmp_path / "results",
                progress=False, overrides=overrides)
  first = run.run("listops", "s5", **kwargs)
  (run_dir,) = (tmp_path / "results" / "runs" / "listops" / "s5").iterdir()
  evals = [r for r in read_metrics(run_dir / "metrics.jsonl") if "val/loss" in r]
  shutil.rmtree(run_dir / "checkpoints" / "4")
  (run_dir / "final.json").write_text(json.dumps({**first, "status": "running"}))
  again = run.run("listops", "s5", **kwargs)
  assert again["status"] == "complete" and again["step"] == 4
  resumed = [r for r in read_metrics(run_dir / "metrics.jsonl") if "val/loss" in r]
  assert resumed[-1]["step"] == 4 and resumed[-1]["val/loss"] == evals[-1]["val/loss"]
  assert resumed[-1]["test/loss"] == evals[-1]["test/loss"]
