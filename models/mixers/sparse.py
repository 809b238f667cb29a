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

  A block's keys are its own positions (all of them) and the shared ones: every block's summary
  cells, then the G global positions, the same list for every block.

  Returns:
    query_pos [N,l] (positions >= T are never allowed), shared_pos [S] (S = N |offsets| + G) and
    shared_ok [N,S] bool: False for a block's own summary cells (its own keys hold them) and for
    positions >= T. Pads are the caller's to remove.
  """
  globals_ = min(num_global, length)
  n = max(1, -(-(length - globals_) // block))
  offsets = summary_offsets(block, summary)
  starts = globals_ + np.arange(n) * block
  query_pos = starts[:, None] + np.arange(block)                               # [N,l]
  shared_pos = np.concatenate([(starts[:, None] + offsets).ravel(), np.arange(globals_)])
  elsewhere = np.arange(n)[:, None] != np.repeat(np.arange(n), offsets.size)[None]
  shared_ok = np.concatenate([elsewhere, np.ones((n, globals_), bool)], 1)
  return query_pos, shared_pos, shared_ok & (shared_pos < length)[None]


def sparse_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, *, block: int,
                     summary: int, num_global: int = 0) -> jax.Array:
  """Fixed-pattern attention over real keys (see `sparse_layout`), computed in query blocks.

  Args:
    q, k: [B,T,H,Dh] queries and keys; v: [B,T,H,Dv] values.
    mask: [B,T] bool, True on real tokens.
    block: l, positions per block; summary: c, summary cells at the end of each block (plus its
      first position); num_global: G, the first G positions attend to and are seen by all.
  Returns:
    [B,T,H,Dv]; O(B T H (l + (c+1) T/l + G) D) time, O(B T H (l + (c+1) T/l + G)) memory for the
    weights (the shared keys are read once, not per block): quadratic in T for a fixed l ((c+1)/l
    of softmax's pairs), O(T^1.5) with the paper's l ~ sqrt(T).
  """
  length = q.shape[1]
  globals_ = min(num_global, length)
  query_pos, shared_pos, shared_ok = sparse_layout(length, block, summary, num_global)
  b, _, h, dh = q.shape
  at = lambda a, p: gather_positions(a, jnp.broadcast_to(jnp.asarray(p), (b, h, *p.shape)))
  real = lambda p: (jnp.take(mask, jnp.asarray(np.minimum(p, length - 1)), axis=1)
                    & jnp.asarray(p < length)[None])
  q_blocks = at(q, query_pos) * dh ** -0.5                                      # [B,H,N,l,Dh]
  own_ok = real(query_pos)[:, None, :, None, :]                                 # [B,1,N,1,l]
  cells_ok = jnp.asarray(shared_ok)[None, None, :, None] & real(shared_pos)[:, None, None, None]
  own = jnp.einsum("bhnqd,bhnkd->bhnqk", q_blocks, at(k, query_pos))             # [B,H,N,l,l]
  cells = jnp.einsum("bhnqd,bhsd->bhnqs", q_blocks, at(k, shared_pos))           # [B,H,N,l,S]
  # One softmax over both parts. The max is a stabiliser only, over allowed keys; masking before
  # exp keeps a pad out of the gradient (as block_sparse.gathered_attention).
  top = jnp.maximum(jnp.max(jnp.where(own_ok, own, -jnp.inf), -1, keepdims=True),
                    jnp.max(jnp.where(cells_ok, cells, -jnp.inf), -1, keepdims=True))
  top = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top), top, 0.0))
  w_own = jnp.exp(jnp.where(own_ok, own - top, -jnp.inf))
  w_cells = jnp.exp(jnp.where(cells_ok, cells - top, -jnp.inf))
  total = w_own.sum(-1) + w_cells.sum(-1)
  y = (jnp.einsum("bhnqk,bhnkd->bhnqd", w_own, at(v, query_pos))
       + jnp.einsum("bhnqs,bhsd->bhnqd", w_cells, at(v, shared_pos)))
  y = y / jnp.where(total > 0, total, 1.0)[..., None]                          # [B,H,N,l,Dv]
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
