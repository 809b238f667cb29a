"""Sparse Transformer (Child et al. 2019), the "fixed" pattern as LRA ran it, bidirectional.

Positions are cut into blocks of l. Query t attends to every position of its own block (the
paper's A1: floor(s/l) = floor(t/l)) and to the summary cells of every block (A2: s mod l in
{l-c, ..., l}, read as the LRA code reads it, l mod l = 0: each block's first position and its
last c). The two sets are merged into one head's pattern (the paper's "merged" head; LRA's
Fixed1Pattern | Fixed2Pattern), without the LRA code's causal mask: an encoder attends both ways.
The first `num_global` positions (a CLS token) attend to and are attended by all, as the LRA
code's `use_cls_token`; the blocks start after them.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra.models.mixers.block_sparse import gather_positions, gathered_attention
from lra.models.mixers.projections import project_qkv


def summary_offsets(block: int, summary: int) -> np.ndarray:
  """The offsets within a block of its summary cells: 0 and l-c .. l-1."""
  return np.array(sorted({0, *range(max(0, block - summary), block)}))


def sparse_layout(length: int, block: int, summary: int, num_global: int = 0
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The static pattern for T = `length`, in N = ceil((T - G) / l) query blocks.

  Returns:
    query_pos [N,l], key_pos [N,K] (the block itself, the summary cells of every block, then the
    G global positions; K = l + N |offsets| + G) and pattern [N,l,K] bool (the block's own
    summary cells are listed twice and allowed once; positions >= T never; pads are the
    caller's to remove).
  """
  globals_ = min(num_global, length)
  n = max(1, -(-(length - globals_) // block))
  offsets = summary_offsets(block, summary)
  starts = globals_ + np.arange(n) * block
  query_pos = starts[:, None] + np.arange(block)                               # [N,l]
  cells = (starts[:, None] + offsets).ravel()                                  # [N*S]
  key_pos = np.concatenate([query_pos, np.broadcast_to(cells, (n, cells.size)),
                            np.broadcast_to(np.arange(globals_), (n, globals_))], axis=1)
  elsewhere = np.arange(n)[:, None] != np.repeat(np.arange(n), offsets.size)[None]
  keys = np.concatenate([np.ones((n, block), bool), elsewhere, np.ones((n, globals_), bool)], 1)
  pattern = np.broadcast_to((keys & (key_pos < length))[:, None], (n, block, key_pos.shape[1]))
  return query_pos, key_pos, pattern


def sparse_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, *, block: int,
                     summary: int, num_global: int = 0) -> jax.Array:
  """Fixed-pattern attention over real keys (see `sparse_layout`), computed in query blocks.

  Args:
    q, k: [B,T,H,Dh] queries and keys; v: [B,T,H,Dv] values.
    mask: [B,T] bool, True on real tokens.
    block: l, positions per block; summary: c, summary cells at the end of each block (plus its
      first position); num_global: G, the first G positions attend to and are seen by all.
  Returns:
    [B,T,H,Dv]; O(B T H (l + (c+1) T/l + G) D) time and memory: quadratic in T for a fixed l
    ((c+1)/l of softmax's pairs), O(T^1.5) with the paper's l ~ sqrt(T).
  """
  length = q.shape[1]
  globals_ = min(num_global, length)
  query_pos, key_pos, pattern = sparse_layout(length, block, summary, num_global)
  b, _, h, _ = q.shape
  positions = lambda p: jnp.broadcast_to(jnp.asarray(p), (b, h, *p.shape))
  key_real = jnp.take(mask, jnp.asarray(np.minimum(key_pos, length - 1)), axis=1)   # [B,N,K]
  # Every query of a block has the same keys, so the pattern's first row stands for the block.
  allowed = jnp.asarray(pattern[None, None, :, :1]) & key_real[:, None, :, None, :]  # [B,1,N,1,K]
  y, _ = gathered_attention(gather_positions(q, positions(query_pos)),
                            gather_positions(k, positions(key_pos)),
                            gather_positions(v, positions(key_pos)), allowed)        # [B,H,N,l,Dv]
  y = jnp.swapaxes(y.reshape(b, h, -1, y.shape[-1]), 1, 2)[:, :length - globals_]
  if not globals_:
    return y
  gq, gk, gv = (jnp.swapaxes(a, 1, 2) for a in (q, k, v))
  y_global, _ = gathered_attention(gq[:, :, :globals_], gk, gv, mask[:, None, None, :])
  return jnp.concatenate([jnp.swapaxes(y_global, 1, 2), y], axis=1)


class SparseMixer(nn.Module):
  """Sparse Transformer (Child et al. 2019), fixed pattern, merged head: O(T (l + c T / l)).

  Attributes:
    block: l, positions per block (LRA code: 50 for every task).
    summary: c, summary cells at the end of each block, besides its first (LRA code: 10).
    num_global: the first G positions attend to and are attended by all (the LRA code makes the
      CLS token so when it pools by CLS: `model.pooling=cls` with 1 here).
  """
  # Read by the contract's memory check (models/mixers/contract.py).
  QUADRATIC = ("a fixed block of l: each query sees its block and the (c+1) T / l summary cells, "
               "so (c+1)/l of softmax's pairs")

  dim: int
  num_heads: int
  max_len: int
  block: int = 50
  summary: int = 10
  num_global: int = 0

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    head_dim = self.dim // self.num_heads
    q, k, v = project_qkv(x, self.num_heads, head_dim)
    y = sparse_attention(q, k, v, mask, block=self.block, summary=self.summary,
                         num_global=self.num_global)
    return nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(y), carry
