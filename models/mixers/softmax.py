"""Softmax (full, bidirectional) attention: the quadratic baseline every mixer is compared to."""
from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp


def softmax_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, *,
                      query_chunk: int = 0) -> jax.Array:
  """Scaled dot-product attention over real keys.

  Args:
    q: [B,Tq,H,Dh] queries (Tq = T except in Luna's and Linformer's uses).
    k: [B,T,H,Dh] keys.
    v: [B,T,H,Dv] values.
    mask: [B,T] bool, True on real tokens; padded keys get zero weight.
    query_chunk: if 0 < query_chunk < Tq, queries are taken this many at a time and the backward
      pass recomputes each chunk's weights from its saved log-normaliser (as FlashAttention
      does), so the [B,H,Tq,T] weights never exist whole. Same values up to float rounding.
  Returns:
    [B,Tq,H,Dv].
  """
  num_queries = q.shape[1]
  if not 0 < query_chunk < num_queries:
    probs = jax.nn.softmax(_logits(q, k, mask), axis=-1)
    return jnp.einsum("bhts,bshd->bthd", probs, v)
  num_chunks = -(-num_queries // query_chunk)
  q = jnp.pad(q, ((0, 0), (0, num_chunks * query_chunk - num_queries), (0, 0), (0, 0)))
  return _chunked_attention(q, k, v, mask, query_chunk)[:, :num_queries]


def _logits(q: jax.Array, k: jax.Array, mask: jax.Array) -> jax.Array:
  """[B,Tq,H,Dh], [B,T,H,Dh], [B,T] -> scaled logits [B,H,Tq,T], pads at the dtype's minimum."""
  logits = jnp.einsum("bthd,bshd->bhts", q * q.shape[-1] ** -0.5, k)
  # finfo.min rather than -inf keeps an all-pad row finite (its outputs are ignored anyway).
  return jnp.where(mask[:, None, None, :], logits, jnp.finfo(logits.dtype).min)


def _to_chunks(x: jax.Array, chunk: int) -> jax.Array:
  """[B,N*Q,...] -> [N,B,Q,...]: the leading axis is what lax.map and lax.scan walk over."""
  return jnp.moveaxis(x.reshape(x.shape[0], -1, chunk, *x.shape[2:]), 1, 0)


def _from_chunks(x: jax.Array) -> jax.Array:
  """[N,B,Q,...] -> [B,N*Q,...]."""
  return jnp.moveaxis(x, 0, 1).reshape(x.shape[1], -1, *x.shape[3:])


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _chunked_attention(q, k, v, mask, chunk):
  """softmax_attention with Tq a multiple of `chunk`, one query chunk at a time."""
  return _chunked_forward(q, k, v, mask, chunk)[0]


def _chunked_forward(q, k, v, mask, chunk):
  def attend(q_chunk):
    logits = _logits(q_chunk, k, mask)                       # [B,H,Q,T]
    top = logits.max(-1, keepdims=True)
    unnormalised = jnp.exp(logits - top)
    total = unnormalised.sum(-1, keepdims=True)
    # Dividing the [Q,Dv] output rather than the [Q,T] weights saves a pass over the weights.
    y = jnp.einsum("bhts,bshd->bthd", unnormalised, v) / jnp.moveaxis(total, 1, 2)
    return y, (top + jnp.log(total))[..., 0]                  # log-normaliser [B,H,Q]

  y, log_norm = jax.lax.map(attend, _to_chunks(q, chunk))
  y = _from_chunks(y)
  return y, (q, k, v, mask, y, log_norm)


def _chunked_backward(chunk, saved, dy):
  q, k, v, mask, y, log_norm = saved
  # d(softmax)/d(logits) needs sum_s p_ts dp_ts = sum_d dy_td y_td: a [T] row sum, not a [T,T] one.
  dy_dot_y = jnp.swapaxes(_to_chunks(jnp.einsum("bthd,bthd->bth", dy, y), chunk), 2, 3)  # [N,B,H,Q]

  def step(carry, chunk_inputs):
    dk, dv = carry
    q_chunk, dy_chunk, log_norm_chunk, dy_dot_y_chunk = chunk_inputs
    probs = jnp.exp(_logits(q_chunk, k, mask) - log_norm_chunk[..., None])    # [B,H,Q,T]
    dv = dv + jnp.einsum("bhts,bthd->bshd", probs, dy_chunk)
    dprobs = jnp.einsum("bthd,bshd->bhts", dy_chunk, v)
    dlogits = probs * (dprobs - dy_dot_y_chunk[..., None]) * q.shape[-1] ** -0.5
    dk = dk + jnp.einsum("bhts,bthd->bshd", dlogits, q_chunk)
    return (dk, dv), jnp.einsum("bhts,bshd->bthd", dlogits, k)

  chunks = (_to_chunks(q, chunk), _to_chunks(dy, chunk), log_norm, dy_dot_y)
  (dk, dv), dq = jax.lax.scan(step, (jnp.zeros_like(k), jnp.zeros_like(v)), chunks)
  return _from_chunks(dq), dk, dv, None


_chunked_attention.defvjp(_chunked_forward, _chunked_backward)


class SoftmaxMixer(nn.Module):
  """Softmax attention (Vaswani et al. 2017): exact, O(T^2) time and memory.

  Attributes:
    query_chunk: queries per chunk (0: all at once). On a CPU the [B,H,T,T] weights of long
      sequences are gigabytes written, faulted in and freed every step; chunks keep them small
      (`lra bench` measures the trade; docs/protocol.md has the numbers).
  """
  dim: int
  num_heads: int
  max_len: int
  query_chunk: int = 0

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    head_dim = self.dim // self.num_heads
    q, k, v = jnp.split(nn.DenseGeneral((3, self.num_heads, head_dim), name="qkv")(x), 3, axis=2)
    q, k, v = (t.squeeze(2) for t in (q, k, v))
    y = softmax_attention(q, k, v, mask, query_chunk=self.query_chunk)
    y = nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(y)
    return y, carry
