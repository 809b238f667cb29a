"""Latte-RGLRU (Dolga et al., ICLR version), bidirectional: Latte whose latent probabilities
p(l|t), p(s|l) read y = RG-LRU(Conv(x)) instead of x; values still come from x. Linear in T.

The RG-LRU is the gated linear recurrence of Griffin (De et al. 2024), run forwards and backwards
as associative scans; `LatentFeatures` (conv + recurrence) is shared with latte_rglru_swa.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra.models.mixers.latte import latte_attention

RGLRU_C = 8.0  # Griffin's constant: a_t = a^(c r_t)


def linear_recurrence(a: jax.Array, b: jax.Array, mask: jax.Array,
                      reverse: bool = False) -> jax.Array:
  """h_t = a_t h_{t-1} + b_t from h = 0 (or h_t = a_t h_{t+1} + b_t when reverse), in O(log T)
  depth by an associative scan.

  Args:
    a, b: [B,T,D] decay and input.
    mask: [B,T] bool. At pads a = 1 and b = 0, so the state passes through them unchanged: the
      backward scan starts from zero at the last real token, whatever and however many pads follow.
  Returns:
    [B,T,D] states.
  """
  real = mask[..., None]
  a = jnp.where(real, a, 1.0)
  b = jnp.where(real, b, 0.0)

  def combine(earlier, later):
    a_e, b_e = earlier
    a_l, b_l = later
    return a_e * a_l, a_l * b_e + b_l

  return jax.lax.associative_scan(combine, (a, b), axis=1, reverse=reverse)[1]


def rg_lru(x: jax.Array, recurrence_logits: jax.Array, input_logits: jax.Array,
           decay_logits: jax.Array, mask: jax.Array, reverse: bool = False) -> jax.Array:
  """Griffin's Real-Gated Linear Recurrent Unit on already-projected gate logits.

  a_t = sigmoid(decay)^(c r_t), r_t = sigmoid(recurrence_logits), i_t = sigmoid(input_logits),
  h_t = a_t h_{t-1} + sqrt(1 - a_t^2) (i_t x_t).

  Args:
    x, recurrence_logits, input_logits: [B,T,D]; decay_logits: [D]; mask: [B,T] bool.
    reverse: run from the last real token to the first.
  Returns:
    [B,T,D]; zero at pads before the first real token of the scan direction.
  """
  log_a = -RGLRU_C * jax.nn.sigmoid(recurrence_logits) * jax.nn.softplus(-decay_logits)[None, None]
  # The floor bounds sqrt's gradient where a_t -> 1 (Griffin clips that gradient too).
  scale = jnp.sqrt(jnp.maximum(-jnp.expm1(2.0 * log_a), 1e-6))
  return linear_recurrence(jnp.exp(log_a), scale * jax.nn.sigmoid(input_logits) * x, mask,
                           reverse)


def _decay_init(key, shape, dtype=jnp.float32):
  """Logits of a with a^c uniform in [0.9, 0.999] (Griffin's initialisation)."""
  a_c = jax.random.uniform(key, shape, dtype, 0.9, 0.999)
  a = a_c ** (1.0 / RGLRU_C)
  return jnp.log(a) - jnp.log1p(-a)


class RGLRU(nn.Module):
  """One direction of the RG-LRU with its own dense gates: [B,T,D] -> [B,T,D]."""
  reverse: bool = False

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
    width = x.shape[-1]
    decay = self.param("decay_logits", _decay_init, (width,))
    return rg_lru(x, nn.Dense(width, name="recurrence_gate")(x),
                  nn.Dense(width, name="input_gate")(x), decay, mask, self.reverse)


class LatentFeatures(nn.Module):
  """y = BiRGLRU(Conv(x)), the input of the latent probabilities: [B,T,D] -> [B,T,D].

  Attributes:
    conv_size: K of the depthwise, centred 1-D convolution (0 disables it). Pads are zeroed
      first, so a real position reads only real tokens and zeros.
    recurrence: run the RG-LRU after the convolution (False gives Latte-Conv).
    combine: "concat" projects [forward, backward] back to D; "sum" adds the two directions.
  """
  conv_size: int = 3
  recurrence: bool = True
  combine: str = "concat"

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
    width = x.shape[-1]
    y = jnp.where(mask[..., None], x, 0.0)
    if self.conv_size:
      y = nn.Conv(width, (self.conv_size,), padding="SAME", feature_group_count=width,
                  name="conv")(y)
    if not self.recurrence:
      return y
    forward = RGLRU(reverse=False, name="forward")(y, mask)
    backward = RGLRU(reverse=True, name="backward")(y, mask)
    if self.combine == "sum":
      return forward + backward
    if self.combine == "concat":
      return nn.Dense(width, name="combine")(jnp.concatenate([forward, backward], axis=-1))
    raise ValueError(f"combine must be 'concat' or 'sum', got {self.combine!r} "
                     f"(--config.mixers.<mixer>.combine).")


class LatteRGLRUMixer(nn.Module):
  """Latte-RGLRU: Latte with latent probabilities from a conv + bidirectional RG-LRU, O(T L).

  Choices where the paper is open (switchable): values come from x (only p(l|t), p(s|l) read y);
  the convolution is depthwise and centred (K=3) before the recurrence, as Griffin places its
  conv before the RG-LRU; gates are dense D x D; the two directions have separate weights and
  are combined by a projection of their concatenation (`combine="sum"` adds them).
  """
  dim: int
  num_heads: int
  max_len: int
  num_latents: int = 40
  conv_size: int = 3
  recurrence: bool = True
  combine: str = "concat"

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    if self.num_latents % self.num_heads:
      raise ValueError(f"latte_rglru: num_latents={self.num_latents} must be a multiple of "
                       f"num_heads={self.num_heads} (latents are split across heads).")
    per_head = self.num_latents // self.num_heads
    head_dim = self.dim // self.num_heads
    y = LatentFeatures(self.conv_size, self.recurrence, self.combine, name="latent_features")(
        x, mask)
    q = nn.DenseGeneral((self.num_heads, per_head), name="query_latents")(y)
    k = nn.DenseGeneral((self.num_heads, per_head), name="key_latents")(y)
    v = nn.DenseGeneral((self.num_heads, head_dim), name="value")(x)
    out = latte_attention(q, k, v, mask)
    return nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(out), carry
