"""A probe for tools/s5_diagnosis.py: S5 whose input has each channel's mean over the sequence's
real tokens removed, the part of every image its background shares (not a mixer of the suite)."""
import jax.numpy as jnp
from lra.models.mixers.s5 import S5Mixer


class CentredS5(S5Mixer):
  def __call__(self, x, mask, *, deterministic, carry=None):
    w = mask[..., None].astype(x.dtype)
    mean = jnp.sum(x * w, axis=1, keepdims=True) / jnp.maximum(jnp.sum(w, axis=1, keepdims=True), 1)
    return super().__call__(x - mean, mask, deterministic=deterministic, carry=carry)
