"""Mega-Chunk (Ma et al. 2023): a damped EMA, then single-head gated attention within chunks.

Multi-dimensional damped EMA per channel d with N components (Mega, Section 3.1), both ways:
h_t = q * h_{t-1} + p * beta * x_t (componentwise, q = 1 - p * alpha), y_t = sum_n gamma_n h_t,n
/ sqrt(N), for a forward and a backward kernel. It is a convolution, computed by FFT in
O(T log T) time and O(T) memory. The EMA output x' gives the queries and keys (shared z with
per-role scale and offset), the gates and the candidate; attention runs within fixed chunks of c
tokens (linear in T), with a learned bias per relative position:
  v = silu(W_v x), x' = silu(EMA(x) + omega * x), [u, z, r, hx] from W x',
  h = silu(hx + W_h (r * Attn_chunk(q(z), k(z), v))), output u * (h - x).
The layer adds x itself, so x + output is Mega's gated update x + u * (h - x). In Mega's pre-norm
layer everything above reads the normalised input but the update moves from the un-normalised
one; the encoder's block passes that as `residual`.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


def ema_kernel(p: jax.Array, alpha: jax.Array, beta: jax.Array, gamma: jax.Array,
               length: int) -> jax.Array:
  """[D,T] impulse response of the damped EMA: k_t = sum_n gamma_n p_n beta_n q_n^t / sqrt(N).

  Args:
    p, alpha: [D,N] in (0, 1), the EMA weight and damping; q = 1 - p * alpha.
    beta, gamma: [D,N] the expansion and projection of each channel into its N components.
    length: T.
  """
  decay = 1.0 - p * alpha
  steps = jnp.arange(length, dtype=jnp.float32)[None, None]
  powers = jnp.exp(jnp.log(decay)[..., None] * steps)                 # [D,N,T]
  return jnp.einsum("dn,dnt->dt", p * beta * gamma / np.sqrt(p.shape[-1]), powers)


def bidirectional_ema(x: jax.Array, mask: jax.Array, k_fwd: jax.Array,
                      k_bwd: jax.Array) -> jax.Array:
  """y_t = sum_{s<=t} k_fwd[t-s] x_s + sum_{s>=t} k_bwd[s-t] x_s over real tokens s.

  Pads are zeroed first, so they add nothing in either direction: the backward sum at any real t
  starts at the last real token, as on the unpadded sequence. Both convolutions share one FFT of
  x, zero-padded to 2T so that no lag wraps around.

  Args:
    x: [B,T,D]; mask: [B,T] bool, True on real tokens; k_fwd, k_bwd: [D,T] kernels.
  Returns:
    [B,T,D] float32; O(B T D log T) time, O(B T D) memory.
  """
  length = x.shape[1]
  x = jnp.where(mask[..., None], x, 0.0).astype(jnp.float32)
  spectrum = jnp.fft.rfft(x, n=2 * length, axis=1)                    # [B,T+1,D]
  k_fwd, k_bwd = (jnp.fft.rfft(k, n=2 * length, axis=1).T for k in (k_fwd, k_bwd))
  # The backward sum is a cross-correlation: the conjugate spectrum of its kernel.
  return jnp.fft.irfft(spectrum * (k_fwd + jnp.conj(k_bwd))[None], n=2 * length, axis=1)[:, :length]


def chunked_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, chunk: int,
                      bias: jax.Array) -> jax.Array:
  """Softmax attention within consecutive chunks of `chunk` tokens, padded keys excluded.

  Args:
    q, k: [B,T,Z] queries (already scaled) and keys; v: [B,T,E] values.
    mask: [B,T] bool, True on real tokens.
    chunk: c; the last chunk is filled with pads (chunks start at absolute positions, so
      trailing pads never move a real token to another chunk).
    bias: [c,c] added to every chunk's scores (a bias per relative position).
  Returns:
    [B,T,E]; O(B T c (Z + E)) time and memory. A query whose chunk has no real key gets 0.
  """
  batch, length = mask.shape
  fill = -length % chunk
  if fill:
    q, k, v = (jnp.pad(a, ((0, 0), (0, fill), (0, 0))) for a in (q, k, v))
    mask = jnp.pad(mask, ((0, 0), (0, fill)))
  chunks = (length + fill) // chunk
  q, k, v = (a.reshape(batch, chunks, chunk, a.shape[-1]) for a in (q, k, v))
  real = mask.reshape(batch, chunks, 1, chunk)
  scores = jnp.einsum("bncz,bnsz->bncs", q, k) + bias[None, None]
  # Pads leave the max (a stabiliser only) and the sum; a chunk of pads only keeps 0 weights.
  top = jax.lax.stop_gradient(jnp.max(jnp.where(real, scores, -jnp.inf), axis=-1, keepdims=True))
  weights = jnp.exp(jnp.where(real, scores - jnp.where(jnp.isfinite(top), top, 0.0), -jnp.inf))
  total = jnp.sum(weights, axis=-1, keepdims=True)
  # At least 1 where the chunk has a real key; an all-pad chunk divides 0 by 1, not by a tiny
  # floor, whose forward-mode derivative would be 0 / tiny^2 = NaN.
  weights = weights / jnp.where(total > 0, total, 1.0)
  out = jnp.einsum("bncs,bnse->bnce", weights, v)
  return out.reshape(batch, chunks * chunk, -1)[:, :length]


def relative_bias(table: jax.Array, size: int) -> jax.Array:
  """[size,size] bias[i,j] = table[c - 1 + j - i] from a [2c-1] table (size <= c)."""
  center = (table.shape[0] - 1) // 2
  offsets = jnp.arange(size)[None, :] - jnp.arange(size)[:, None]
  return table[center + offsets]


class MegaMixer(nn.Module):
  """Mega-Chunk: bidirectional damped EMA + single-head gated attention in chunks, O(T c).

  Attributes:
    chunk_size: c, tokens per attention chunk (sequences shorter than c are one chunk).
    z_dim: width of the shared query/key projection z.
    hidden_dim: width of the values and of r (0: 2 D, as Mega's LRA models).
    ema_dim: N, EMA components per channel.
  """
  dim: int
  num_heads: int
  max_len: int
  chunk_size: int = 128
  z_dim: int = 64
  hidden_dim: int = 0
  ema_dim: int = 16

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None,
               residual: jax.Array | None = None):
    """x: [B,T,D], mask: [B,T] -> (u * (h - residual) [B,T,D], carry).

    residual: [B,T,D], the point the gated update moves from: the un-normalised input when x is
      its normalised copy (Mega's pre-norm layer); None: x itself.
    """
    d, n, length = self.dim, self.ema_dim, x.shape[1]
    hidden = self.hidden_dim or 2 * d
    v = nn.silu(nn.Dense(hidden, name="v")(x))

    # EMA parameters per direction (Mega's init): p, alpha through sigmoids, beta near +-1.
    logits = self.param("ema_logits", nn.initializers.normal(0.2), (2, 2, d, n))
    signs = jnp.where(jnp.arange(n) % 2, -1.0, 1.0)
    beta = self.param("ema_beta", lambda key, shape: signs[None, None] + 0.02 * jax.random.normal(
        key, shape), (2, d, n))
    gamma = self.param("ema_gamma", nn.initializers.normal(1.0), (2, d, n))
    omega = self.param("ema_omega", nn.initializers.normal(1.0), (d,))
    p, alpha = jax.nn.sigmoid(logits.astype(jnp.float32))
    k_fwd, k_bwd = (ema_kernel(p[i], alpha[i], beta[i].astype(jnp.float32),
                               gamma[i].astype(jnp.float32), length) for i in (0, 1))
    ema = bidirectional_ema(x, mask, k_fwd, k_bwd).astype(x.dtype)
    mx = nn.silu(ema + omega[None, None] * x)

    u, zr, hx = jnp.split(nn.Dense(2 * d + self.z_dim + hidden, name="mx")(mx),
                          [d, d + self.z_dim + hidden], axis=-1)
    z, r = jnp.split(nn.silu(zr), [self.z_dim], axis=-1)
    qk_scale = self.param("qk_gamma", nn.initializers.normal(0.02), (2, self.z_dim))
    qk_shift = self.param("qk_beta", nn.initializers.zeros, (2, self.z_dim))
    q, k = z[None] * qk_scale[:, None, None] + qk_shift[:, None, None]
    chunk = min(self.chunk_size, length)
    table = self.param("rel_bias", nn.initializers.normal(0.02), (2 * self.chunk_size - 1,))
    att = chunked_attention(q * self.z_dim ** -0.5, k, v, mask, chunk,
                            relative_bias(table, chunk).astype(q.dtype))
    h = nn.silu(hx + nn.Dense(d, name="h")(att * r))
    return jax.nn.sigmoid(u) * (h - (x if residual is None else residual)), carry
