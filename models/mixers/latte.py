"""Bidirectional Latte (Dolga et al.): attention through L latent states, linear in T.

Each token picks latents with p(l|t) = softmax_l(q_t); each latent summarises the sequence with
p(s|l) = softmax_s(k_s) over real positions s. Output x_t = sum_l p(l|t) sum_s p(s|l) v_s.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


def latte_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
  """Latent attention with pads excluded from the time softmax and from its stability max.

  Args:
    q: [B,T,H,L] latent logits of the queries (softmax over L).
    k: [B,T,H,L] latent logits of the keys (softmax over T, real tokens only).
    v: [B,T,H,Dv] values.
    mask: [B,T] bool, True on real tokens.
  Returns:
    [B,T,H,Dv]; O(B T H L Dv) time, O(B H L Dv + B T H L) memory.
  """
  real = mask[:, :, None, None]
  # The max is only a stabiliser (softmax is shift-invariant), so no gradient flows through it.
  k_max = jnp.max(jnp.where(real, k, -jnp.inf), axis=1, keepdims=True)
  k_max = jax.lax.stop_gradient(jnp.where(jnp.isfinite(k_max), k_max, 0.0))
  k_exp = jnp.where(real, jnp.exp(k - k_max), 0.0)                    # [B,T,H,L]
  normaliser = jnp.sum(k_exp, axis=1)                                  # [B,H,L]
  states = jnp.einsum("bthl,bthd->bhld", k_exp, v)                     # [B,H,L,Dv]
  # An all-pad sequence has a zero normaliser; its outputs are ignored, so keep them finite.
  states = states / jnp.maximum(normaliser, jnp.finfo(k_exp.dtype).tiny)[..., None]
  return jnp.einsum("bthl,bhld->bthd", jax.nn.softmax(q, axis=-1), states)


class LatteMixer(nn.Module):
  """Bidirectional Latte: latent attention, O(T L) time and memory (L latents split over heads)."""
  dim: int
  num_heads: int
  dropout_rate: float
  max_len: int
  num_latents: int = 40

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    if self.num_latents % self.num_heads:
      raise ValueError(f"latte: num_latents={self.num_latents} must be a multiple of "
                       f"num_heads={self.num_heads} (latents are split across heads).")
    per_head = self.num_latents // self.num_heads
    head_dim = self.dim // self.num_heads
    q = nn.DenseGeneral((self.num_heads, per_head), name="query_latents")(x)
    k = nn.DenseGeneral((self.num_heads, per_head), name="key_latents")(x)
    v = nn.DenseGeneral((self.num_heads, head_dim), name="value")(x)
    y = latte_attention(q, k, v, mask)
    y = nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(y)
    return y, carry
