"""The cheap linear attention of de Brebisson & Vincent (2016), linear attention in its first form.

Sections 3-4 of "A Cheap Linear Attention Mechanism with Fast Lookups and Fixed-Size
Representations": the hidden states h_s are both keys and values, and the whole sequence becomes
one D x D matrix C, looked up as R = C q with no softmax and no normalisation:
  basic (eq. 4):  C = sum_s h_s h_s^T = H^T H;
  gated (eq. 6):  C = sum_s f_s f_s^T, f_s = sigmoid(W h_s + b) * h_s.
In our bidirectional encoder each token looks up with its own hidden state, q_t = h_t, and the
sums run over real tokens only.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import errors


def cheap_linear_attention(q: jax.Array, k: jax.Array, v: jax.Array,
                           mask: jax.Array) -> jax.Array:
  """R_t = (sum_s v_s k_s^T) q_t over real s: no feature map, no softmax, no normaliser.

  Args:
    q, k: [B,T,H,Dh] lookups and keys.
    v: [B,T,H,Dv] values.
    mask: [B,T] bool, True on real tokens.
  Returns:
    [B,T,H,Dv]; O(B T H Dh Dv) time, O(B H Dh Dv) memory for the fixed-size representation.
  """
  k = jnp.where(mask[:, :, None, None], k, 0.0)
  c = jnp.einsum("bshd,bshe->bhde", k, v)                            # [B,H,Dh,Dv]
  return jnp.einsum("bthd,bhde->bthe", q, c)


FORMS = ("basic", "gated")


class CheapLinearMixer(nn.Module):
  """Cheap linear attention (de Brebisson & Vincent 2016): R = C h, C = H^T H or gated, O(T D^2).

  The mechanism has no parameters in its basic form (the gated form learns W, b) and one D x D
  representation (one head: `num_heads` is not used). Its output grows with the sequence
  (docs/protocol.md measures how much), so the encoder reads it through two settings that leave
  the lookup itself alone:

  Attributes:
    form: "basic" (C = H^T H) or "gated" (C = sum f f^T, f = sigmoid(W h + b) * h).
    output_norm: LayerNorm each R_t before the output projection: every token's lookup keeps its
      direction and loses its length-dependent scale.
    output_projection: a learned D x D map after that (False: R_t goes to the residual as is).
  """
  dim: int
  num_heads: int
  max_len: int
  form: str = "basic"
  output_norm: bool = True
  output_projection: bool = True

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    if self.form not in FORMS:
      raise errors.BadValue(f"cheap_linear: form must be one of {FORMS}, got {self.form!r} "
                            "(--config.mixers.cheap_linear.form=gated).")
    h = x[:, :, None, :]                                                 # one head, [B,T,1,D]
    f = h * jax.nn.sigmoid(nn.Dense(self.dim, name="gate")(h)) if self.form == "gated" else h
    y = cheap_linear_attention(h, f, f, mask)[:, :, 0]
    if self.output_norm:
      y = nn.LayerNorm(name="out_norm")(y)
    if self.output_projection:
      y = nn.Dense(self.dim, name="out")(y)
    return y, carry
