"""Optimizer and learning-rate schedules from `config.train`."""
from __future__ import annotations

import jax.numpy as jnp
import ml_collections
import optax


def learning_rate_schedule(train: ml_collections.ConfigDict) -> optax.Schedule:
  """cosine: linear warm-up then cosine decay to 0 (Latte paper).

  rsqrt: the original LRA schedule, lr * min(1, step/warmup) / sqrt(max(step, warmup)).
  """
  if train.schedule == "cosine":
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=train.learning_rate, warmup_steps=train.warmup_steps,
        decay_steps=max(train.num_steps, train.warmup_steps + 1), end_value=0.0)
  if train.schedule == "rsqrt":
    warmup = max(train.warmup_steps, 1)

    def rsqrt(step):
      step = jnp.asarray(step, jnp.float32) + 1.0
      return train.learning_rate * jnp.minimum(1.0, step / warmup) / jnp.sqrt(
          jnp.maximum(step, warmup))
    return rsqrt
  raise ValueError(f"train.schedule must be 'cosine' or 'rsqrt', got {train.schedule!r}")


def make_optimizer(train: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """AdamW with the schedule above and optional global-norm clipping."""
  adamw = optax.adamw(learning_rate_schedule(train), b1=train.b1, b2=train.b2, eps=train.eps,
                      weight_decay=train.weight_decay)
  if train.grad_clip_norm > 0:
    return optax.chain(optax.clip_by_global_norm(train.grad_clip_norm), adamw)
  return adamw
