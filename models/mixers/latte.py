"""Bidirectional Latte (Dolga et al.): attention through L latent states, linear in T.

Each token picks latents with p(l|t) = softmax_l(q_t); each latent summarises the sequence with
p(s|l) = softmax_s(k_s) over real positions s. Output x_t = sum_l p(l|t) sum_s p(s|l) v_s.
With `vapor=True` (VAPOR, the paper's ICLR version) values are rotated by position before mixing
and rotated back after: x_t = R^t sum_l p(l|t) sum_s p(s|l) R^{-s} v_s, still linear in T.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra import errors
from lra.models.mixers.rope import rope_frequencies, rotate_pairs


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
  states = _latent_states(k, mask, v, "bthl,bthd->bhld")              # [B,H,L,Dv]
  return jnp.einsum("bthl,bhld->bthd", jax.nn.softmax(q, axis=-1), states)


def _latent_states(k: jax.Array, mask: jax.Array, values: jax.Array, spec: str) -> jax.Array:
  """sum_s p(s|l) values_s per latent, p(s|l) = softmax_s(k_s) over real tokens; `spec` the
  einsum of exp(k) [B,T,H,L] with the values (per head [B,T,H,Dv], or shared [B,T,D])."""
  real = mask[:, :, None, None]
  # The max is only a stabiliser (softmax is shift-invariant), so no gradient flows through it.
  k_max = jnp.max(jnp.where(real, k, -jnp.inf), axis=1, keepdims=True)
  k_max = jax.lax.stop_gradient(jnp.where(jnp.isfinite(k_max), k_max, 0.0))
  # Mask before exp, not after: a pad logit over ~88 above the real max overflows exp, and the
  # discarded inf would still turn the gradient into 0 * inf = NaN.
  k_exp = jnp.exp(jnp.where(real, k - k_max, -jnp.inf))               # [B,T,H,L]
  normaliser = jnp.sum(k_exp, axis=1)                                  # [B,H,L]
  states = jnp.einsum(spec, k_exp, values)                             # [B,H,L,*]
  # An all-pad sequence has a zero normaliser; its outputs are ignored, so keep them finite.
  return states / jnp.maximum(normaliser, jnp.finfo(k_exp.dtype).tiny)[..., None]


def latte_attention_mapped(q: jax.Array, k: jax.Array, x: jax.Array, mask: jax.Array,
                           w_v: jax.Array, w_o: jax.Array) -> jax.Array:
  """latte_attention(q, k, x W_v, mask) through the output map W_o, summed over heads, in the
  order that costs least: the values and the output map are linear and each latent's weights
  over time sum to 1, so sum_s p(s|l) (x_s W_v) W_o = (sum_s p(s|l) x_s) (W_v W_o). The [B,T,H,Dv]
  values and the per-head outputs are never formed: per token D (2L) multiply-adds for the
  latents instead of D (2D) for the two maps (lra bench --against, docs/performance.md).

  Args:
    q, k: [B,T,H,L] latent logits, as in `latte_attention`.
    x: [B,T,D] the tokens the values are read from.
    mask: [B,T] bool, True on real tokens.
    w_v: [D,H,Dv] the value map; w_o: [H,Dv,D] the output map.
  Returns:
    [B,T,D] (without biases: a value bias b_v reaches every output as b_v W_o).
  """
  states = _latent_states(k, mask, x, "bthl,btd->bhld")               # [B,H,L,D]
  mapped = jnp.einsum("bhld,dhe,hef->bhlf", states, w_v, w_o)          # [B,H,L,D]
  return jnp.einsum("bthl,bhlf->btf", jax.nn.softmax(q, axis=-1), mapped)


def vapor_latte_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                          theta: jax.Array) -> jax.Array:
  """Latte with value-acting positional rotations: R^t sum_l p(l|t) sum_s p(s|l) R^{-s} v_s.

  R is block-diagonal with 2x2 rotations by theta on the channel pairs (i, i + Dh/2), so R^t
  rotates by t * theta and the mixed value reaching t from s is R^{t-s} v_s: relative positions
  act on the values while the attention weights stay Latte's.

  Args:
    q, k: [B,T,H,L] latent logits, as in `latte_attention`.
    v: [B,T,H,Dv] values, Dv even.
    mask: [B,T] bool, True on real tokens. Positions t are absolute indices 0..T-1, so trailing
      pads change no real position (and R^{-s} v_s at a pad gets zero weight anyway).
    theta: [H,Dv/2] rotation angle per channel pair.
  Returns:
    [B,T,H,Dv].
  """
  # Angles in float32 even under bf16: t * theta reaches 1e4 rad on long tasks.
  positions = jnp.arange(v.shape[1], dtype=jnp.float32)
  angles = (positions[:, None, None] * theta.astype(jnp.float32)[None])[None]  # [1,T,H,Dv/2]
  y = latte_attention(q, k, rotate_pairs(v, -angles), mask)
  return rotate_pairs(y, angles)


class LatteMixer(nn.Module):
  """Bidirectional Latte: latent attention, O(T L) time and memory (L latents split over heads).

  Attributes:
    num_latents: L, split evenly over the heads.
    vapor: rotate values by position (VAPOR). Our choices where the paper is open: one learnable
      angle per head and channel pair, initialised to RoPE's frequencies (base 10^4), pairs
      (i, i + Dh/2); Dh must be even.
    bias: add a bias to the q, k, v and output projections. The paper writes them without one and
      the authors' code (`BidLatte` in raresdolga/latte_transformer) has none.
  """
  dim: int
  num_heads: int
  max_len: int
  num_latents: int = 40
  vapor: bool = False
  bias: bool = False

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    if self.num_latents % self.num_heads:
      raise errors.BadValue(f"latte: num_latents={self.num_latents} must be a multiple of "
                            f"num_heads={self.num_heads} (latents are split across heads).")
    per_head = self.num_latents // self.num_heads
    head_dim = self.dim // self.num_heads
    # One fused map per head into q, k, v (D x H x (2 L/H + Dh)) and one out of the heads, as
    # DenseGeneral would make them (the same names, shapes and initial values).
    w_qkv, b_qkv = _Map((x.shape[-1], self.num_heads, 2 * per_head + head_dim), 1, self.bias,
                        name="qkv")()
    w_out, b_out = _Map((self.num_heads, head_dim, self.dim), 2, self.bias, name="out")()
    w_qk, w_v = jnp.split(w_qkv.astype(x.dtype), [2 * per_head], axis=-1)
    qk = jnp.einsum("btd,dhe->bthe", x, w_qk)
    if self.bias:
      qk = qk + b_qkv[None, None, :, :2 * per_head].astype(x.dtype)
    q, k = jnp.split(qk, 2, axis=-1)
    if not self.vapor:
      y = latte_attention_mapped(q, k, x, mask, w_v, w_out.astype(x.dtype))
      if self.bias:  # each latent's weights over time sum to 1: the value bias passes whole
        y = y + (jnp.einsum("he,hef->f", b_qkv[:, 2 * per_head:], w_out)
                 + b_out).astype(x.dtype)[None, None]
      return y, carry
    v = jnp.einsum("btd,dhe->bthe", x, w_v)
    if self.bias:
      v = v + b_qkv[None, None, :, 2 * per_head:].astype(x.dtype)
    if self.vapor:
      if head_dim % 2:
        raise errors.BadValue("latte: vapor=True rotates channel pairs, so dim/num_heads must be "
                              f"even; got {head_dim}. Set --config.model.dim to a multiple of "
                              "2*num_heads or --config.mixers.latte.vapor=False.")
      theta = self.param("vapor_theta", lambda _, shape: jnp.broadcast_to(
          rope_frequencies(shape[1]), shape), (self.num_heads, head_dim // 2))
      y = vapor_latte_attention(q, k, v, mask, theta)
    y = jnp.einsum("bthe,hef->btf", y, w_out.astype(x.dtype))
    return (y + b_out.astype(x.dtype)[None, None] if self.bias else y), carry


class _Map(nn.Module):
  """The kernel (and bias) of a linear map, as nn.DenseGeneral would create it under this name:
  `shape` its kernel's, the first `inputs` axes read from the input; lecun-normal over the
  flattened (inputs, outputs), zero bias. The mixer applies it in the order that costs least."""
  shape: tuple[int, ...]
  inputs: int
  bias: bool

  @nn.compact
  def __call__(self):
    fan_in = int(np.prod(self.shape[:self.inputs]))
    flat = (fan_in, int(np.prod(self.shape[self.inputs:])))
    kernel = self.param("kernel", lambda key: nn.initializers.lecun_normal()(key, flat).reshape(
        self.shape))
    bias = (self.param("bias", nn.initializers.zeros_init(), self.shape[self.inputs:])
            if self.bias else None)
    return kernel, bias
