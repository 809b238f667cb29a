"""Sparse-attention machinery shared by Longformer, BigBird and Reformer: queries in blocks, each
block attending to keys gathered by position, never a [T,T] matrix.

A pattern is a layout: per query block its query positions [..,N,Q], the key positions it gathers
[..,N,K] and which (query, key) pairs are allowed [..,N,Q,K]. `dense_pattern` writes a layout as
a [T,T] mask for the tests; the mixers never call it.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def pad_to_blocks(x: jax.Array, mask: jax.Array, block: int) -> tuple[jax.Array, jax.Array]:
  """[B,T,...], [B,T] -> the same with T padded to a multiple of `block`, the new rows pads."""
  extra = -x.shape[1] % block
  pad = [(0, 0), (0, extra)] + [(0, 0)] * (x.ndim - 2)
  return jnp.pad(x, pad), jnp.pad(mask, ((0, 0), (0, extra)))


def gather_positions(x: jax.Array, positions: jax.Array) -> jax.Array:
  """x [B,T,H,D] at positions [B,H,*P] (each row its own; out-of-range ones clipped, so the caller
  must disallow them) -> [B,H,*P,D]."""
  b, t, h, d = x.shape
  flat = positions.reshape(b, h, -1)
  x = jnp.swapaxes(x, 1, 2)                                                   # [B,H,T,D]
  out = jnp.take_along_axis(x, jnp.clip(flat, 0, t - 1)[..., None], axis=2)
  return out.reshape(*positions.shape, d)


def gathered_attention(q: jax.Array, k: jax.Array, v: jax.Array, allowed: jax.Array,
                       logit_offset: jax.Array | float = 0.0) -> tuple[jax.Array, jax.Array]:
  """Softmax attention of each query over its own gathered keys, disallowed keys excluded exactly.

  Args:
    q: [...,Q,Dh] queries (scaled here by Dh^-1/2).
    k: [...,K,Dh] keys gathered for these queries.
    v: [...,K,Dv] their values.
    allowed: [...,Q,K] bool; pads and keys outside the pattern are False.
    logit_offset: added to the allowed logits (Reformer's -log of a key's multiplicity).
  Returns:
    y [...,Q,Dv] and the log-normaliser [...,Q]; a row with no allowed key has output 0 and
    log-normaliser 0 (a caller combining rows by their normalisers must leave such rows out).
  """
  logits = jnp.einsum("...qd,...kd->...qk", q * q.shape[-1] ** -0.5, k) + logit_offset
  # The max is a stabiliser only: over allowed keys (a huge pad logit cannot underflow the real
  # ones) and without gradient. Masking before exp keeps an overflowing pad out of the gradient.
  top = jnp.max(jnp.where(allowed, logits, -jnp.inf), axis=-1, keepdims=True)
  top = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top), top, 0.0))
  weights = jnp.exp(jnp.where(allowed, logits - top, -jnp.inf))
  total = jnp.sum(weights, axis=-1)
  # A row with a key has total >= 1 (its top key's weight is exp(0)). A row with none divides 0 by
  # 1, not by a tiny floor: forward-mode derivatives would be 0 / tiny^2 = NaN there.
  total = jnp.where(total > 0, total, 1.0)
  y = jnp.einsum("...qk,...kd->...qd", weights, v) / total[..., None]
  return y, top[..., 0] + jnp.log(total)


def dense_pattern(query_pos: jax.Array, key_pos: jax.Array, allowed: jax.Array,
                  length: int) -> jax.Array:
  """Tests only: how many times each key is allowed for each query, as a dense [...,T,T] array.

  Args:
    query_pos: [...,N,Q] positions of each block's queries.
    key_pos: [...,N,K] positions of the keys each block gathers.
    allowed: [...,N,Q,K] bool.
    length: T; positions outside [0, T) are dropped.
  """
  lead = allowed.shape[:-3]
  rows = jnp.broadcast_to(query_pos[..., :, None], allowed.shape).reshape(*lead, -1)
  cols = jnp.broadcast_to(key_pos[..., None, :], allowed.shape).reshape(*lead, -1)
  keep = (allowed.reshape(*lead, -1) & (rows >= 0) & (rows < length) & (cols >= 0)
          & (cols < length))
  flat = jnp.where(keep, rows * length + cols, length * length)  # dropped -> one spare cell

  def count(f, w):
    return jnp.zeros(length * length + 1, jnp.int32).at[f].add(w)[:-1]
  for _ in lead:
    count = jax.vmap(count)
  return count(flat, keep.astype(jnp.int32)).reshape(*lead, length, length)
