"""What a run trains for: classifying examples, or denoising them (self-pretraining). The one train
loop (lra.training.train) asks its objective for the loss sums of a batch, which splits it
evaluates and which evaluation is the best; everything else is the same loop.

Sums and counts, so averages are exact over any device count and partial batch: classification
counts examples, denoising counts hidden tokens (`train/loss` is then the loss per hidden token
and `train/accuracy` the share of hidden values predicted exactly).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import optax


def classification_sums(logits: jax.Array, batch: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
  """logits [B,C] against batch["label"], each row weighted by batch["weight"]."""
  logits = logits.astype(jnp.float32)  # the loss is float32 whatever the compute dtype
  loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"])
  correct = (jnp.argmax(logits, -1) == batch["label"]).astype(jnp.float32)
  w = batch["weight"]
  return {"loss_sum": jnp.sum(loss * w), "correct_sum": jnp.sum(correct * w), "count": jnp.sum(w)}


def _exact(predictions: jax.Array, values: jax.Array, loss: str) -> jax.Array:
  """Whether each value is predicted exactly: the argmax class ("ce"), or the nearest of the 256
  levels to the prediction scaled back from [-1, 1] ("l1")."""
  if loss == "ce":
    return jnp.argmax(predictions, -1) == values
  return jnp.round((predictions[..., 0] + 1.0) * 127.5) == values


def denoising_sums(output: tuple[jax.Array, ...], loss: str) -> dict[str, jax.Array]:
  """The Denoiser's (predictions [N,T',P,V], values [N,T',P], hidden [N,T'], weight [N]) -> sums
  over hidden tokens only: unhidden tokens and pads add nothing, whatever their values.

  A token's loss is the mean over its P values of the cross-entropy of each value's class ("ce")
  or of |prediction - value| with values scaled to [-1, 1] ("l1"); its `correct_sum` is the
  share of its P values predicted exactly (argmax, or the nearest of the 256 levels under "l1").
  """
  predictions, values, hidden, weight = output
  predictions = predictions.astype(jnp.float32)
  if loss == "ce":
    per_value = optax.softmax_cross_entropy_with_integer_labels(predictions, values)
  else:
    per_value = jnp.abs(predictions[..., 0] - (values.astype(jnp.float32) / 127.5 - 1.0))
  correct = _exact(predictions, values, loss)
  w = hidden.astype(jnp.float32) * weight[:, None]  # [N,T']
  return {"loss_sum": jnp.sum(jnp.mean(per_value, -1) * w),
          "correct_sum": jnp.sum(jnp.mean(correct.astype(jnp.float32), -1) * w),
          "count": jnp.sum(w)}


def lit_sums(output: tuple[jax.Array, ...], loss: str) -> dict[str, jax.Array]:
  """Among the hidden pixel values, those above the lowest level (lit: paths, markers and
  distractors, not the black background): how many, and how many predicted exactly. A held-out
  score over every hidden value mostly counts background (90% of a Pathfinder image's pixels
  are level 0 of 16), which predicting black everywhere would score as well."""
  predictions, values, hidden, weight = output
  correct = _exact(predictions.astype(jnp.float32), values, loss)
  lit = (values > 0) & hidden[..., None]  # [N,T',P]
  w = lit.astype(jnp.float32) * weight[:, None, None]
  return {"lit_correct_sum": jnp.sum(correct.astype(jnp.float32) * w), "lit_count": jnp.sum(w)}


@dataclasses.dataclass(frozen=True)
class Objective:
  """What differs between the loop's two uses.

  Attributes:
    name: "classify" or "denoise" (config.objective).
    sums: (model output, batch) -> {"loss_sum", "correct_sum", "count"}.
    splits: the splits each evaluation reads (denoising never reads test).
    best: the metric that picks the best evaluation, and whether higher is better.
    noise: whether batches carry the per-token noise the Denoiser hides tokens by.
    held_out: (model output, batch) -> more `<name>_correct_sum` and `<name>_count` sums that
      evaluations report as `<split>/<name>_accuracy` (training's step computes none of them).
  """
  name: str
  sums: Callable[[Any, Mapping[str, jax.Array]], dict[str, jax.Array]]
  splits: tuple[str, ...] = ("val", "test")
  best: tuple[str, bool] = ("val/accuracy", True)
  noise: bool = False
  held_out: Callable[[Any, Mapping[str, jax.Array]], dict[str, jax.Array]] | None = None


CLASSIFY = Objective("classify", classification_sums)


def of(config: ml_collections.ConfigDict, pixels: bool = False) -> Objective:
  """The objective a config trains for (configs written before SPT classify); `pixels`: the task's
  inputs are pixel values (its spec has no pad id), whose evaluations also score the lit pixels
  alone (lit_sums).

  Denoising picks its best evaluation as the paper's code does (IdoAmos/not-from-scratch,
  `train.monitor`): the held-out share of hidden tokens predicted right under "ce", the held-out
  mean absolute error under "l1" (docs/presets_spt.md, "Self-pretraining (SPT)").
  """
  if config.get("objective", "classify") != "denoise":
    return CLASSIFY
  loss = config.spt.loss
  return Objective("denoise", lambda output, batch: denoising_sums(output, loss), splits=("val",),
                   best=("val/accuracy", True) if loss == "ce" else ("val/loss", False),
                   noise=True,
                   held_out=(lambda output, batch: lit_sums(output, loss)) if pixels else None)
