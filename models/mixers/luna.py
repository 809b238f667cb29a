"""Luna (Ma et al. 2021): linear unified nested attention through a packed sequence P of length L.

Pack: P' = Attn(P, X) over real tokens. Unpack: Y = Attn(X, P'). P goes to the next layer as
LN(P + P') through the mixer carry; layer 1 starts from a learned P.
"""
from __future__ import annotations

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra.models.mixers.softmax import softmax_attention


def luna_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                   packed_q: jax.Array,
                   unpack: Callable[[jax.Array], tuple[jax.Array, jax.Array]],
                   ) -> tuple[jax.Array, jax.Array]:
  """Pack the real tokens into L rows, then let every token attend to those rows.

  Args:
    q: [B,T,H,Dh] token queries (for the unpack attention).
    k: [B,T,H,Dh] token keys and v: [B,T,H,Dv] token values (for the pack attention).
    mask: [B,T] bool, True on real tokens; only they are packed.
    packed_q: [B,L,H,Dh] queries of the packed sequence P.
    unpack: maps the packed heads [B,L,H,Dv] to the keys [B,L,H,Dh] and values [B,L,H,Dv]
      the tokens attend to (the module's learned projections).
  Returns:
    (y [B,T,H,Dv], packed [B,L,H,Dv]); O(B T H L Dh) time and memory.
  """
  packed = softmax_attention(packed_q, k, v, mask)
  packed_k, packed_v = unpack(packed)
  y = softmax_attention(q, packed_k, packed_v, jnp.ones(packed_k.shape[:2], bool))
  return y, packed


class LunaMixer(nn.Module):
  """Luna (Ma et al. 2021): pack into L learned rows, unpack back, O(T L); P threads layers.

  Attributes:
    packed_len: L, the length of the packed sequence P (Luna on LRA: 16, 128 or 256).
  The carry is P [B,L,D]: None in the first layer, which creates it from a learned [L,D] table.
  """
  dim: int
  num_heads: int
  max_len: int
  packed_len: int = 128

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T], carry: None or P [B,L,D] -> ([B,T,D], P' [B,L,D])."""
    head_dim = self.dim // self.num_heads
    if carry is None:
      table = self.param("packed", nn.initializers.normal(1.0), (self.packed_len, self.dim))
      carry = jnp.broadcast_to(table, (x.shape[0], self.packed_len, self.dim))
    heads = lambda name: nn.DenseGeneral((self.num_heads, head_dim), name=name)
    q, k, v = heads("query")(x), heads("key")(x), heads("value")(x)
    packed_q = heads("packed_query")(carry)
    # Keys/values of the packed rows come straight from their heads: one linear map, equal to
    # Luna's output projection followed by its key/value projections.
    from_heads = lambda name: nn.DenseGeneral((self.num_heads, head_dim), axis=(-2, -1),
                                              name=name)
    packed_key, packed_value = from_heads("packed_key"), from_heads("packed_value")
    y, packed = luna_attention(q, k, v, mask, packed_q,
                               lambda p: (packed_key(p), packed_value(p)))
    y = nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(y)
    packed = nn.DenseGeneral(self.dim, axis=(-2, -1), name="packed_out")(packed)
    return y, nn.LayerNorm(name="packed_norm")(carry + packed)
