"""The query, key and value projections the attention mixers share."""
from __future__ import annotations

import flax.linen as nn
import jax


def project_qkv(x: jax.Array, num_heads: int, head_dim: int,
                name: str = "qkv") -> tuple[jax.Array, jax.Array, jax.Array]:
  """[B,T,D] -> q, k, v, each [B,T,H,Dh], from one Dense kernel `name` of shape [D,3,H,Dh].

  Called inside a mixer's compact `__call__`, so the kernel is that mixer's parameter.
  """
  qkv = nn.DenseGeneral((3, num_heads, head_dim), name=name)(x)
  return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
