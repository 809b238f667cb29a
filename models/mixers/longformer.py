"""Longformer (Beltagy et al. 2020): sliding-window attention plus a few global tokens.

A token t attends to the keys s with t - left <= s <= t + right (left = w - w//2 - 1, right = w//2:
w positions counting itself, as the LRA code's window) and to every global token; a global token
(the first `num_global` positions) attends to every real key, through its own projections.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra.models.mixers.block_sparse import gather_positions, gathered_attention, pad_to_blocks
from lra.models.mixers.projections import project_qkv


def window_sides(window: int) -> tuple[int, int]:
  """(left, right) neighbours of a window of w positions (the LRA code's split)."""
  return window - window // 2 - 1, window // 2


# Queries go in blocks of at most this many: a block gathers the keys of every block its window
# touches, about w + block of them per query: w + 128 = 640 keys at the LRA window of 512, against
# 768 with blocks of w/2 (fwd+bwd at B=32, T=1024 on the CPU: 10% faster; blocks of 64 were no
# faster than 128, and blocks of 32 slower, as more blocks cost more gathers).
QUERY_BLOCK = 128


def longformer_layout(length: int, window: int, num_global: int, block: int = QUERY_BLOCK
                      ) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
  """The static pattern for T = `length`, in N = ceil(T / block) query blocks.

  Returns:
    block (the query block: `block`, at most the longer side of the window and T), query_pos [N,Q],
    key_pos [N,K] (the window's neighbour blocks, then the global positions; out-of-range ones
    are never allowed), pattern [N,Q,K] bool (keys in the window that are not global, and the
    global keys; pads are the caller's to remove).
  """
  left, right = window_sides(window)
  block = max(1, min(block, max(left, right), length))
  n = -(-length // block)
  before, after = min(-(-left // block), n - 1), min(-(-right // block), n - 1)
  starts = np.arange(n)[:, None] * block
  query_pos = starts + np.arange(block)
  window_pos = starts + np.arange(-before * block, (after + 1) * block)
  diff = window_pos[:, None, :] - query_pos[:, :, None]
  globals_ = min(num_global, length)
  in_window = ((diff >= -left) & (diff <= right) & (window_pos >= globals_)[:, None, :]
               & (window_pos < length)[:, None, :])
  key_pos = np.concatenate([window_pos, np.broadcast_to(np.arange(globals_), (n, globals_))], 1)
  pattern = np.concatenate([in_window, np.ones((n, block, globals_), bool)], axis=2)
  return block, query_pos, key_pos, pattern


def longformer_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, *,
                         window: int, num_global: int,
                         global_qkv: tuple[jax.Array, jax.Array, jax.Array] | None = None,
                         block: int = QUERY_BLOCK) -> jax.Array:
  """Sliding-window + global attention over real keys, computed in blocks.

  Args:
    q, k: [B,T,H,Dh] queries and keys; v: [B,T,H,Dv] values (the window's projections).
    mask: [B,T] bool, True on real tokens.
    window: w, positions each token sees around itself (itself included).
    num_global: G, the first G positions are global.
    global_qkv: the global tokens' own (q, k, v), shaped as q, k, v; None shares the window's.
    block: queries per block (at most the window's longer side); the values do not depend on it.
  Returns:
    [B,T,H,Dv]; O(B T H w D) time and memory (queries in blocks of b see about w + b + G keys),
    plus O(B G T H D) for the global rows.
  """
  length = q.shape[1]
  globals_ = min(num_global, length)
  if globals_:
    gq, gk, gv = (jnp.swapaxes(a, 1, 2) for a in (global_qkv or (q, k, v)))
    y_global, _ = gathered_attention(gq[:, :, :globals_], gk, gv, mask[:, None, None, :])
  block, _, key_pos, pattern = longformer_layout(length, window, num_global, block)
  (q, _), (k, _), (v, real) = (pad_to_blocks(a, mask, block) for a in (q, k, v))
  b, padded, h, _ = q.shape
  q_blocks = jnp.moveaxis(q.reshape(b, -1, block, h, q.shape[-1]), 3, 1)    # [B,H,N,Q,Dh]
  positions = jnp.broadcast_to(jnp.asarray(key_pos), (b, h, *key_pos.shape))
  allowed = pattern[None, None] & real[:, None, key_pos][:, :, :, None, :]       # [B,1,N,Q,K]
  y, _ = gathered_attention(q_blocks, gather_positions(k, positions),
                            gather_positions(v, positions), allowed)
  y = jnp.moveaxis(y, 1, 3).reshape(b, padded, h, -1)[:, :length]
  return y.at[:, :globals_].set(jnp.swapaxes(y_global, 1, 2)) if globals_ else y


class LongformerMixer(nn.Module):
  """Longformer (Beltagy et al. 2020): sliding window + global tokens, O(T w) time and memory.

  Attributes:
    window: w, positions each token attends around itself (LRA code: 512).
    num_global: the first G positions attend to and are attended by all (the CLS token when
      model.pooling=cls: the paper's classification setup); the LRA code ran none.
    global_projections: the global rows get their own q, k, v projections (the paper and the
      LRA code); False shares the window's.
  """
  dim: int
  num_heads: int
  max_len: int
  window: int = 512
  num_global: int = 0
  global_projections: bool = True

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    head_dim = self.dim // self.num_heads
    q, k, v = project_qkv(x, self.num_heads, head_dim)
    global_qkv = (project_qkv(x, self.num_heads, head_dim, "qkv_global")
                  if self.num_global and self.global_projections else None)
    y = longformer_attention(q, k, v, mask, window=self.window, num_global=self.num_global,
                             global_qkv=global_qkv)
    return nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(y), carry
