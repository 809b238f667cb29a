"""Softmax (full, bidirectional) attention: the quadratic baseline every mixer is compared to."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


def softmax_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
  """Scaled dot-product attention over real keys.

  Args:
    q, k: [B,T,H,Dh] queries and keys.
    v: [B,T,H,Dv] values.
    mask: [B,T] bool, True on real tokens; padded keys get zero weight.
  Returns:
    [B,T,H,Dv].
  """
  scale = q.shape[-1] ** -0.5
  logits = jnp.einsum("bthd,bshd->bhts", q * scale, k)
  # finfo.min rather than -inf keeps an all-pad row finite (its outputs are ignored anyway).
  logits = jnp.where(mask[:, None, None, :], logits, jnp.finfo(logits.dtype).min)
  weights = jax.nn.softmax(logits, axis=-1)
  return jnp.einsum("bhts,bshd->bthd", weights, v)


class SoftmaxMixer(nn.Module):
  """Softmax attention (Vaswani et al. 2017): exact, O(T^2) time and memory."""
  dim: int
  num_heads: int
  max_len: int

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    head_dim = self.dim // self.num_heads
    q, k, v = jnp.split(nn.DenseGeneral((3, self.num_heads, head_dim), name="qkv")(x), 3, axis=2)
    q, k, v = (t.squeeze(2) for t in (q, k, v))
    y = softmax_attention(q, k, v, mask)
    y = nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(y)
    return y, carry
