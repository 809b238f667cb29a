"""Latte-RGLRU (Dolga et al., ICLR version), bidirectional: Latte whose latent probabilities
p(l|t), p(s|l) read y = RG-LRU(x) instead of x; values still come from x. Linear in T.

The paper's RG-LRU replaces the 1-D convolution of its Latte-Conv (kept here as
`latent_input="conv"`). The RG-LRU is the gated linear recurrence of Griffin (De et al. 2024),
run forwards and backwards as associative scans; `LatentFeatures` is shared with latte_rglru_swa.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import errors
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
  """Griffin's RG-LRU gates and decay, read from x_t alone, scanned in each direction asked for.

  One set of weights serves both directions (the gates see no state, so they have no direction):
  2 D^2 + 3 D parameters, as many as one causal RG-LRU. Returns one [B,T,D] per direction.
  """

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array,
               reverse: tuple[bool, ...] = (False, True)) -> list[jax.Array]:
    width = x.shape[-1]
    decay = self.param("decay_logits", _decay_init, (width,))
    recurrence_logits = nn.Dense(width, name="recurrence_gate")(x)
    input_logits = nn.Dense(width, name="input_gate")(x)
    return [rg_lru(x, recurrence_logits, input_logits, decay, mask, r) for r in reverse]


LATENT_INPUTS = ("rglru", "conv")


class LatentFeatures(nn.Module):
  """y, the input of the latent probabilities: BiRGLRU(x) or Conv(x), [B,T,D] -> [B,T,D].

  Pads are zeroed first, so a real position reads only real tokens (and the conv zeros).

  Attributes:
    latent_input: "rglru" (Latte-RGLRU, the paper's) or "conv" (Latte-Conv: a centred 1-D
      convolution over all D channels, K D^2 + D weights, no recurrence).
    conv_size: K, the convolution's width (latent_input="conv" only).
    combine: how the two RG-LRU directions meet. "sum" (default): one set of gates, forward +
      backward states. "concat" (ours): each direction its own gates and decay, and a Dense(D)
      of [forward, backward]; 6 D^2 + 7 D weights.
  """
  latent_input: str = "rglru"
  conv_size: int = 3
  combine: str = "sum"

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
    width = x.shape[-1]
    x = jnp.where(mask[..., None], x, 0.0)
    if self.latent_input == "conv":
      return nn.Conv(width, (self.conv_size,), padding="SAME", name="conv")(x)
    if self.latent_input != "rglru":
      raise errors.BadValue(f"latent_input must be one of {LATENT_INPUTS}, got "
                            f"{self.latent_input!r} (--config.mixers.<mixer>.latent_input).")
    if self.combine == "sum":
      forward, backward = RGLRU(name="rglru")(x, mask)
      return forward + backward
    if self.combine == "concat":
      (forward,) = RGLRU(name="forward")(x, mask, (False,))
      (backward,) = RGLRU(name="backward")(x, mask, (True,))
      return nn.Dense(width, name="combine")(jnp.concatenate([forward, backward], axis=-1))
    raise errors.BadValue(f"combine must be 'sum' or 'concat', got {self.combine!r} "
                          "(--config.mixers.<mixer>.combine).")


class LatteRGLRUMixer(nn.Module):
  """Latte-RGLRU: Latte with latent probabilities read from a bidirectional RG-LRU, O(T L).

  The paper (ICLR version) replaces Latte-Conv's 1-D convolution by the RG-LRU, and says this
  slightly reduces parameters; `latent_input="conv"` gives Latte-Conv. Our choices where the paper
  is open (switchable): values come from x (only p(l|t), p(s|l) read y); Latte-Conv's conv is
  centred and mixes all channels (with a depthwise conv the RG-LRU could not have fewer
  weights); the bidirectional RG-LRU shares its gates between the two directions and adds them
  (`combine`, see LatentFeatures).
  """
  dim: int
  num_heads: int
  max_len: int
  num_latents: int = 40
  latent_input: str = "rglru"
  conv_size: int = 3
  combine: str = "sum"

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    if self.num_latents % self.num_heads:
      raise errors.BadValue(f"latte_rglru: num_latents={self.num_latents} must be a multiple of "
                            f"num_heads={self.num_heads} (latents are split across heads).")
    per_head = self.num_latents // self.num_heads
    head_dim = self.dim // self.num_heads
    y = LatentFeatures(self.latent_input, self.conv_size, self.combine,
                       name="latent_features")(x, mask)
    q = nn.DenseGeneral((self.num_heads, per_head), name="query_latents")(y)
    k = nn.DenseGeneral((self.num_heads, per_head), name="key_latents")(y)
    v = nn.DenseGeneral((self.num_heads, head_dim), name="value")(x)
    out = latte_attention(q, k, v, mask)
    return nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(out), carry
