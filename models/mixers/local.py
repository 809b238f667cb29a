"""Local Attention (LRA's baseline, Tay et al. 2020): softmax attention within fixed blocks.

The sequence is cut into non-overlapping blocks of b consecutive positions; a token attends to
the real tokens of its own block and nothing else. One layer sees at most b tokens, so what a
stack of them reaches is the suite's measure of how local a task is.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra.models.mixers.block_sparse import gathered_attention, pad_to_blocks
from lra.models.mixers.projections import project_qkv


def local_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, *,
                    block: int) -> jax.Array:
  """Softmax attention of each position t over the real s with s // b == t // b.

  Args:
    q, k: [B,T,H,Dh] queries and keys.
    v: [B,T,H,Dv] values.
    mask: [B,T] bool, True on real tokens.
    block: b, positions per block (the last block is padded inside, its extra rows pads).
  Returns:
    [B,T,H,Dv] (a query whose block holds no real token gets 0); O(B T H b D) time and memory.
  """
  length = q.shape[1]
  (q, _), (k, _), (v, real) = (pad_to_blocks(a, mask, block) for a in (q, k, v))
  b, padded, h, _ = q.shape
  blocks = lambda a: jnp.moveaxis(a.reshape(b, padded // block, block, h, -1), 3, 1)
  allowed = real.reshape(b, 1, padded // block, 1, block)                     # [B,1,N,1,b]
  y, _ = gathered_attention(blocks(q), blocks(k), blocks(v), allowed)          # [B,H,N,b,Dv]
  return jnp.moveaxis(y, 1, 3).reshape(b, padded, h, -1)[:, :length]


class LocalMixer(nn.Module):
  """Local Attention (LRA's baseline): softmax within blocks of b positions, O(T b).

  Attributes:
    block: b, positions per block (LRA code: 50; its Image and Pathfinder configs: 64).
  """
  dim: int
  num_heads: int
  max_len: int
  block: int = 50

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    head_dim = self.dim // self.num_heads
    q, k, v = project_qkv(x, self.num_heads, head_dim)
    y = local_attention(q, k, v, mask, block=self.block)
    return nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(y), carry
