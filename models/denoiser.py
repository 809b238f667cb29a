"""Self-pretraining's model: the classifier's own encoder reading its tokens with some hidden, and a
per-token head that predicts what was hidden (Amos et al., ICLR 2024: masked denoising on the
task's own training split).

A fine-tune loads `encoder` into the Classifier (the same module, the same parameter names) and
starts its head afresh; the hidden-token vector (`encoder/mask_token`) and `predict` stay behind.
"""
from __future__ import annotations

from collections.abc import Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import errors
from lra.models.encoder import Encoder, token_mask, token_values

LOSSES = ("ce", "l1")


class Denoiser(nn.Module):
  """Hides a share of each sequence's real tokens and predicts their values from the encoder.

  A token is hidden where its noise (the batch's `noise[B,T]`, uniform in [0, 1), drawn per
  example by lra.tasks.contract.batches; a token reads its first pixel's) is below `mask_ratio`;
  pads are never hidden. With `patch` > 1 a token is a square of P = patch^2 pixels and the head
  predicts all P of them.

  Attributes:
    encoder: the Encoder the classifier uses.
    mask_ratio: the expected share of real tokens hidden.
    loss: "ce" (each value one of `num_values` classes: a vocabulary's ids, or pixel levels)
      or "l1" (each pixel value as a number, scaled to [-1, 1]; one output per value).
    num_values: V, the classes of a value under "ce".
    pixel_levels: for pixels (0-255), the classes they are binned into under "ce" (value *
      levels // 256; 256 keeps every value); None for a vocabulary's ids.
    dual: two sequences per example (Retrieval): both are hidden and predicted, by one head.

  Called on a batch, returns (predictions [N,T',P,V] (V=1 under "l1"), values [N,T',P] int32,
  hidden [N,T'] bool, weight [N]) with N = B (2B when dual).
  """
  encoder: Encoder
  mask_ratio: float
  loss: str
  num_values: int
  pixel_levels: int | None = None
  dual: bool = False

  @nn.compact
  def __call__(self, batch: Mapping[str, jax.Array], *, deterministic: bool):
    if self.loss not in LOSSES:
      raise errors.BadValue(f"spt.loss must be one of {LOSSES}, got {self.loss!r}")
    if not 0.0 < self.mask_ratio < 1.0:
      raise errors.BadValue(f"spt.mask_ratio must be between 0 and 1, got {self.mask_ratio}")
    patch = self.encoder.patch
    levels = self.pixel_levels
    if levels is not None and not 2 <= levels <= 256:
      raise errors.BadValue(f"spt.pixel_levels must be between 2 and 256, got {levels}")
    if levels is None and self.loss == "l1":  # ids of a vocabulary are no numbers to regress
      raise errors.BadValue("spt.loss=l1 predicts pixel values as numbers, and this task reads "
                            "tokens of a vocabulary; pass --config.spt.loss=ce")
    outputs = (levels or self.num_values) if self.loss == "ce" else 1
    predict = nn.Dense(patch * patch * outputs, name="predict")
    parts = []
    for suffix in ("1", "2") if self.dual else ("",):
      tokens, mask = batch["inputs" + suffix], batch["mask" + suffix]
      noise = token_values(batch["noise" + suffix], patch)[..., 0]
      hidden = (noise < self.mask_ratio) & token_mask(mask, patch)
      x, _ = self.encoder(tokens, mask, deterministic=deterministic, hide=hidden, pool=False)
      values = token_values(tokens, patch)
      if levels is not None and self.loss == "ce":
        values = values * levels // 256
      parts.append((predict(x).reshape(*values.shape, outputs), values, hidden, batch["weight"]))
    return tuple(jnp.concatenate(part, axis=0) for part in zip(*parts))
