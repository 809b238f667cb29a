"""`lra bench --against-trainer`'s machinery, without any clone: our loop against a stand-in trainer
written here (plain Flax and Optax on the same model), and S5's schedule against its formula.

The comparison with S5's own code needs a clone of lindermanlab/S5 and is not run here; its
committed records are results/against_trainer/*.json (docs/protocol.md).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from lra.bench import against_trainer
from lra.models.build import build_model
from lra.runs.config_loading import load_data, resolve_config
from lra.training import optim


class StandIn:
  """A trainer of its own: the same model and AdamW, its own step, its own rates (`first_at_peak`:
  step 0 at the peak, as S5's trainer)."""
  name, source = "stand-in", "tests/test_against_trainer.py"

  def __init__(self, config, spec, first_at_peak: bool = False):
    self.model, self.train = build_model(config, spec), config.train
    ours = optim.learning_rate_schedule(config.train)
    at_peak = lambda step: jnp.where(step == 0, self.train.learning_rate, ours(step))  # noqa: E731
    self.schedule = at_peak if first_at_peak else ours
    self.tx = optax.chain(
        optax.clip_by_global_norm(self.train.grad_clip_norm),  # the smoke preset clips at 1
        optax.adamw(self.schedule, b1=self.train.b1, b2=self.train.b2, eps=self.train.eps,
                    weight_decay=self.train.weight_decay))

  def start(self, variables):
    self.params = variables["params"]
    self.opt = self.tx.init(self.params)

  def rates(self, step):
    return {"learning_rate": float(self.schedule(step))}

  def step(self, batch, step):
    def loss_fn(params):
      logits = self.model.apply({"params": params}, batch, deterministic=True)
      labels = jax.nn.one_hot(batch["label"], logits.shape[-1])
      return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits), -1))
    loss, grads = jax.value_and_grad(loss_fn)(self.params)
    updates, self.opt = self.tx.update(grads, self.opt, self.params)
    self.params = optax.apply_updates(self.params, updates)
    return float(loss)

  def theirs_of(self, variables):
    return {"params": variables["params"]}

  def variables(self):
    return {"params": self.params}


@pytest.fixture(scope="module")
def setting(data_dir):
  config = resolve_config("listops", "linear", "smoke", ["train.warmup_steps=3"])
  return config, load_data(config, data_dir, log=lambda _: None)


def test_a_trainer_that_trains_as_ours_stays_equal_step_by_step(setting, tmp_path):
  config, data = setting
  lines = []
  rows = against_trainer.compare(config, data, StandIn(config, data.spec), 6, tmp_path / "run",
                                 lines.append)
  summary = against_trainer.summary(rows)
  assert [r["step"] for r in rows] == list(range(1, 7))
  # Progress: a line before the first (compiling) step, then one per step with both losses.
  assert len(lines) == 7 and "6 steps each" in lines[0]
  assert lines[3].strip().startswith("step 3/6: loss ours") and "theirs" in lines[3]
  assert summary["equal"] and summary["first_rate_difference_step"] is None, rows
  # The rows are real comparisons: the losses move while the two stay together.
  assert len({round(r["loss_ours"], 6) for r in rows}) > 1
  assert summary["max_params_rel"] < against_trainer.PARAM_TOLERANCE


def test_a_first_step_at_the_peak_rate_is_where_the_trainers_part(setting, tmp_path):
  config, data = setting
  peer = StandIn(config, data.spec, first_at_peak=True)
  summary = against_trainer.summary(
      against_trainer.compare(config, data, peer, 4, tmp_path / "run"))
  assert summary["first_parting_step"] == 1 and summary["first_rate_difference_step"] == 1
  assert not summary["equal"] and summary["max_params_rel"] > 10 * against_trainer.PARAM_TOLERANCE


class WithInert(StandIn):
  """A stand-in whose head bias sits 1.0 off ours, declared `inert` (as the Latte peer declares
  the pad token's embedding row): compared apart, outside the verdict."""
  inert = {"head_out/bias": "a parameter off by design"}

  def variables(self):
    return {"params": {**self.params, "head_out": {
        **self.params["head_out"], "bias": self.params["head_out"]["bias"] + 1.0}}}


def test_inert_parameters_are_compared_apart_from_the_verdict(setting, tmp_path):
  config, data = setting
  peer = WithInert(config, data.spec)
  rows = against_trainer.compare(config, data, peer, 3, tmp_path / "run")
  summary = against_trainer.summary(rows)
  assert summary["equal"] and summary["max_params_rel"] < against_trainer.PARAM_TOLERANCE
  assert summary["max_inert_rel"] > 0.1 and all(r["worst_tensor"] != "head_out/bias" for r in rows)
  report = {"command": "lra bench", "peer": peer.name, "source": peer.source,
            "clone_commit": None, "task": "listops", "preset": "smoke", "device": "cpu",
            "date": "today", "summary": summary, "inert": peer.inert,
            "notes": ["a note (its source)"], "rows": rows,
            "data": against_trainer.data_summary(data.meta)}
  text = against_trainer.markdown(report)
  assert "`head_out/bias`, a parameter off by design" in text and "- a note (its source)" in text
  # The record says what data both drew from (its folder is named DATA in the command).
  train_count = f"train {data.meta['splits']['train']:,}"
  assert "Data: " in text and train_count in text and "fingerprint sha256:" in text


def test_our_own_step_on_the_whole_batch_is_the_control(setting, tmp_path):
  """OwnStep (--control): our model and optimizer outside our loop, on each whole batch; equal to
  our loop within rounding here, and its figures go into the record's Markdown beside the peer's."""
  config, data = setting
  rows = against_trainer.compare(config, data, against_trainer.OwnStep(config, data.spec), 4,
                                 tmp_path / "run")
  summary = against_trainer.summary(rows)
  assert summary["equal"] and summary["first_rate_difference_step"] is None, rows
  report = {"command": "lra bench", "peer": "stand-in", "source": "here", "clone_commit": None,
            "task": "listops", "preset": "smoke", "device": "cpu", "date": "today",
            "summary": summary, "rows": rows,
            "control": {"summary": summary, "rows": [
                {k: r[k] for k in ("step", "loss_rel", "params_rel")} for r in rows]}}
  text = against_trainer.markdown(report)
  assert "Control (`--control`)" in text and "control: loss, params rel. diff." in text
  first = next(line for line in text.splitlines() if line.startswith("| 1 |"))
  assert first.endswith(f"| {rows[0]['loss_rel']:.1e}, {rows[0]['params_rel']:.1e} |")
  assert "(control: equal)" in against_trainer.block([report], ["record.json"])


def test_differences_name_the_tensor_that_parts_most():
  ours = {"a": {"w": np.ones(3)}, "b": np.zeros(2)}
  theirs = {"a": {"w": np.array([1.0, 1.0, 1.5])}, "b": np.zeros(2)}
  whole, tensor, name = against_trainer.differences(ours, theirs)
  assert (tensor, name) == (pytest.approx(1 / 3), "a/w")
  assert whole == pytest.approx(0.5 / np.sqrt(1 + 1 + 1.5 ** 2))
  with pytest.raises(ValueError, match="names"):
    against_trainer.differences(ours, {"a": {"w": np.ones(3)}})


def test_micro_batches_are_compared_as_the_whole_batch_they_cut():
  micro = [{"inputs": np.ones((2, 3), np.int32), "mask": np.ones((2, 3), bool),
            "label": np.array([1, 2])},
           {"inputs": np.ones((2, 5), np.int32), "mask": np.ones((2, 5), bool),
            "label": np.array([3, 4])}]
  whole = against_trainer.whole_batch(micro)
  assert whole["inputs"].shape == (4, 5) and whole["label"].tolist() == [1, 2, 3, 4]
  assert whole["mask"][:2, 3:].sum() == 0 and whole["mask"][2:].all()


def test_the_s5_cosine_schedule_is_s5s_trainer_arithmetic():
  """s5/train.py: step 0 at the injected peak; after step s the next rate is
  peak (s + 1) / W while s < W, then peak (1 + cos(pi min(s, N - W) / (N - W))) / 2."""
  train = ml_collections.ConfigDict(dict(schedule="s5_cosine", learning_rate=2e-3,
                                         warmup_steps=10, num_steps=50))
  schedule = optim.learning_rate_schedule(train)

  def s5(step):
    if step == 0:
      return 2e-3
    s = step - 1
    if s < 10:
      return 2e-3 * (s + 1) / 10
    return 2e-3 * 0.5 * (1 + math.cos(math.pi * min(s, 40) / 40))
  for step in (0, 1, 5, 10, 11, 12, 30, 41, 42, 49):
    assert float(schedule(step)) == pytest.approx(s5(step), rel=1e-6, abs=1e-12), step
