"""Optimizer and learning-rate schedules from `config.train`.

A mixer may train some of its parameters apart, as S5 trains its state space parameters: it
declares their names in a setting `ssm_params` (comma-separated), and every parameter of that name
inside a block's mixer gets `train.ssm_learning_rate` (same schedule) and no weight decay.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import optax

from lra import errors


def learning_rate_schedule(train: ml_collections.ConfigDict,
                           peak: float | None = None) -> optax.Schedule:
  """cosine: linear warm-up then cosine decay to 0 (Latte paper).

  rsqrt: the original LRA schedule, lr * min(1, step/warmup) / sqrt(max(step, warmup)).
  linear: linear warm-up then linear decay to 0 at num_steps (fairseq's linear_decay, Mega).
  s5_cosine: the rates lindermanlab/S5's trainer applies (s5/train.py, train_helpers.py): its
    first step at the peak (create_train_state injects it), then step k at
    peak * k / warmup up to the warm-up's end, then peak * (1 + cos(pi * (k - 1) / D)) / 2 with
    D = num_steps - warmup and the count not restarted, so the rate reaches 0 at step D + 1 and
    stays there (each step's rate is set from the step before it). `lra bench --against-trainer`
    checks it against S5's code.
  `peak` replaces train.learning_rate (the same shape for a group with its own rate).
  """
  peak = train.learning_rate if peak is None else peak
  if train.schedule == "cosine":
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=peak, warmup_steps=train.warmup_steps,
        decay_steps=max(train.num_steps, train.warmup_steps + 1), end_value=0.0)
  if train.schedule == "linear":
    decay = max(train.num_steps - train.warmup_steps, 1)
    return optax.join_schedules([
        optax.linear_schedule(0.0, peak, max(train.warmup_steps, 1)),
        optax.linear_schedule(peak, 0.0, decay)], [train.warmup_steps])
  if train.schedule == "rsqrt":
    warmup = max(train.warmup_steps, 1)

    def rsqrt(step):
      step = jnp.asarray(step, jnp.float32) + 1.0
      return peak * jnp.minimum(1.0, step / warmup) / jnp.sqrt(
          jnp.maximum(step, warmup))
    return rsqrt
  if train.schedule == "s5_cosine":
    warmup, decay = max(train.warmup_steps, 1), max(train.num_steps - train.warmup_steps, 1)

    def s5_cosine(step):
      before = jnp.asarray(step, jnp.float32) - 1.0  # the step whose end sets this one's rate
      warm = peak * (before + 1.0) / warmup
      cosine = peak * 0.5 * (1.0 + jnp.cos(jnp.pi * jnp.minimum(before, decay) / decay))
      return jnp.where(step == 0, peak, jnp.where(before < train.warmup_steps, warm, cosine))
    return s5_cosine
  raise errors.BadValue("train.schedule must be 'cosine', 'rsqrt', 'linear' or 's5_cosine', got "
                        f"{train.schedule!r}")


def ssm_params(config: ml_collections.ConfigDict) -> tuple[str, ...]:
  """The parameter names the chosen mixer trains apart (its `ssm_params` setting), or ()."""
  names = config.mixers[config.model.mixer].get("ssm_params", "")
  return tuple(name.strip() for name in names.split(",") if name.strip())


def _labels(names: tuple[str, ...]):
  def label(params: Any) -> Any:
    def one(path, _):
      keys = [getattr(k, "key", str(k)) for k in path]
      return "ssm" if keys[-1] in names and "mixer" in keys[:-1] else "rest"
    return jax.tree_util.tree_map_with_path(one, params)
  return label


def make_optimizer(train: ml_collections.ConfigDict,
                   own_rate: tuple[str, ...] = ()) -> optax.GradientTransformation:
  """AdamW with the schedule above and optional global-norm clipping (of all gradients).

  Args:
    train: config.train.
    own_rate: names of mixer parameters (`ssm_params`) trained with Adam at
      train.ssm_learning_rate (0: train.learning_rate) and no weight decay.
  """
  adamw = optax.adamw(learning_rate_schedule(train), b1=train.b1, b2=train.b2, eps=train.eps,
                      weight_decay=train.weight_decay)
  if own_rate:
    peak = train.ssm_learning_rate or train.learning_rate
    adam = optax.adam(learning_rate_schedule(train, peak), b1=train.b1, b2=train.b2,
                      eps=train.eps)
    adamw = optax.multi_transform({"rest": adamw, "ssm": adam}, _labels(own_rate))
  if train.grad_clip_norm > 0:
    return optax.chain(optax.clip_by_global_norm(train.grad_clip_norm), adamw)
  return adamw
