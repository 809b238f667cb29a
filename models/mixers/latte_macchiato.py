"""Latte Macchiato (Dolga et al., Definition 3), bidirectional: local softmax plus Latte states.

p(s|t) = p(0|t) p_local(s|t) + sum_{l=1..L} p(l|t) p(s|l): state 0 is softmax attention inside the
symmetric window |t - s| <= w/2, states 1..L are Latte's latents, and p(l|t) is a softmax over all
L+1 states. The window is computed in blocks of w/2, so time and memory are linear in T.

The paper defines Macchiato causally: its window is t - w <= s <= t. The symmetric window is our
choice for LRA's bidirectional encoder; it keeps the paper's count of w + 1 positions per token
(w/2 either side) rather than w either side, so a given w costs the same as the paper's.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import errors
from lra.models.mixers.latte import latte_attention
from lra.models.mixers.projections import project_qkv


def local_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                    window: int) -> jax.Array:
  """Softmax attention of each t over the real s with |t - s| <= window // 2, in O(T window).

  Args:
    q, k: [B,T,H,Dh]; v: [B,T,H,Dv]; mask: [B,T] bool, True on real tokens.
    window: w, the width of the symmetric window.
  Returns:
    [B,T,H,Dv].
  """
  half = window // 2
  block = max(half, 1)
  batch, length, heads, _ = q.shape
  num_blocks = -(-length // block)
  extra = num_blocks * block - length
  # One block of padding on each side, so block i sees blocks i-1, i, i+1: all of t +- half.
  pad = lambda a: jnp.pad(a, [(0, 0), (block, block + extra)] + [(0, 0)] * (a.ndim - 2))
  k, v, key_real = pad(k), pad(v), pad(mask)
  neighbours = lambda a: jnp.concatenate(
      [a[:, i * block:(i + num_blocks) * block].reshape(
          (batch, num_blocks, block) + a.shape[2:]) for i in range(3)], axis=2)
  k_blocks, v_blocks = neighbours(k), neighbours(v)                # [B,N,3c,H,*]
  q_blocks = jnp.pad(q, [(0, 0), (0, extra), (0, 0), (0, 0)]).reshape(
      (batch, num_blocks, block) + q.shape[2:])                    # [B,N,c,H,Dh]
  query_pos = jnp.arange(num_blocks * block).reshape(num_blocks, block)
  key_pos = query_pos[:, :1] - block + jnp.arange(3 * block)[None, :]
  allowed = jnp.abs(query_pos[:, :, None] - key_pos[:, None, :]) <= half      # [N,c,3c]
  allowed = allowed[None] & neighbours(key_real)[:, :, None, :]              # [B,N,c,3c]
  logits = jnp.einsum("bnchd,bnshd->bnhcs", q_blocks * q.shape[-1] ** -0.5, k_blocks)
  logits = jnp.where(allowed[:, :, None], logits, jnp.finfo(logits.dtype).min)
  out = jnp.einsum("bnhcs,bnshd->bnchd", jax.nn.softmax(logits, axis=-1), v_blocks)
  return out.reshape((batch, num_blocks * block) + out.shape[3:])[:, :length]


def latte_macchiato_attention(q: jax.Array, k: jax.Array, v: jax.Array, state_logits: jax.Array,
                              latent_k: jax.Array, mask: jax.Array, window: int) -> jax.Array:
  """The mixture of a local window state and L latent states, pads excluded everywhere.

  Args:
    q, k: [B,T,H,Dh] queries and keys of the local state (scaled by 1/sqrt(Dh)).
    v: [B,T,H,Dv] values, shared by the local state and the latents.
    state_logits: [B,T,H,L+1] logits of p(l|t); index 0 is the local state.
    latent_k: [B,T,H,L] latent logits of the keys: p(s|l) = softmax over real s.
    mask: [B,T] bool, True on real tokens.
    window: w; the local state covers |t - s| <= w // 2.
  Returns:
    [B,T,H,Dv]; O(B T H (w Dh + L Dv)) time and memory.
  """
  p_local = jax.nn.softmax(state_logits, axis=-1)[..., :1]
  # p(l|t) restricted to l >= 1 and renormalised is softmax(state_logits[1:]), so the latent
  # part is exactly Latte's core, weighted by 1 - p(0|t).
  latent = latte_attention(state_logits[..., 1:], latent_k, v, mask)
  return p_local * local_attention(q, k, v, mask, window) + (1.0 - p_local) * latent


class LatteMacchiatoMixer(nn.Module):
  """Latte Macchiato: local window softmax + L Latte states in one softmax over states, O(T)."""
  dim: int
  num_heads: int
  max_len: int
  num_latents: int = 40
  window: int = 128

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    if self.num_latents % self.num_heads:
      raise errors.BadValue(f"latte_macchiato: num_latents={self.num_latents} must be a multiple "
                            f"of num_heads={self.num_heads} (latents are split across heads).")
    per_head = self.num_latents // self.num_heads
    head_dim = self.dim // self.num_heads
    q, k, v = project_qkv(x, self.num_heads, head_dim)
    state_logits = nn.DenseGeneral((self.num_heads, per_head + 1), name="state_logits")(x)
    latent_k = nn.DenseGeneral((self.num_heads, per_head), name="key_latents")(x)
    y = latte_macchiato_attention(q, k, v, state_logits, latent_k, mask, self.window)
    y = nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(y)
    return y, carry
