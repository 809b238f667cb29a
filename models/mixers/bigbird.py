"""BigBird (Zaheer et al. 2020), ITC variant as the LRA code ran it: block-sparse attention with
window, global and random blocks.

The sequence is cut into blocks of b tokens. Query block i attends to key blocks i-1, i, i+1
(window), to the first and the last real block (global), and to r random blocks; the two global
blocks' queries attend to every real key. Random blocks are drawn per layer and head from fixed
scores: the r highest-scoring real blocks outside the row's window and globals.
"""
from __future__ import annotations

import zlib

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra.models.mixers.block_sparse import gather_positions, gathered_attention, pad_to_blocks
from lra.models.mixers.projections import project_qkv


def bigbird_layout(mask: jax.Array, block: int, num_random: int, scores: jax.Array
                   ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Which key blocks each query block attends to, per example and head.

  Args:
    mask: [B,T] bool, T a multiple of `block`.
    block: b, tokens per block.
    num_random: r, random blocks per query block (fewer where fewer blocks are left).
    scores: [H,N',N'] fixed random scores, N' >= N = T/b; row i ranks the key blocks of query
      block i. Only [:N, :N] is read, so the pattern of a real block never depends on T.
  Returns:
    slots [B,H,N,3+2+r] key block indices (window, globals, random), valid [B,H,N,3+2+r] (in
    range, real and not already listed), and last [B], each example's last real block.
  """
  b, n = mask.shape[0], mask.shape[1] // block
  last = jnp.max(jnp.where(mask, jnp.arange(mask.shape[1]), 0), axis=1) // block    # [B]
  rows = jnp.arange(n)[:, None]                                              # [N,1]
  fixed = jnp.broadcast_to(jnp.concatenate([rows - 1, rows, rows + 1, 0 * rows], 1), (b, n, 4))
  fixed = jnp.concatenate([fixed, jnp.broadcast_to(last[:, None, None], (b, n, 1))], 2)
  cols = jnp.arange(n)[None, None, None, :]
  taken = (cols == fixed[..., None]).any(2)                                  # [B,N,N]
  candidate = ~taken & (cols[0] <= last[:, None, None])
  top, picked = jax.lax.top_k(jnp.where(candidate[:, None], scores[None, :, :n, :n], -jnp.inf),
                              min(num_random, n))                            # [B,H,N,r]
  picked = jnp.where(jnp.isfinite(top), picked, -1)
  slots = jnp.concatenate([jnp.broadcast_to(fixed[:, None], (*picked.shape[:3], 5)), picked], 3)
  valid = (slots >= 0) & (slots <= last[:, None, None, None])
  # A window block can also be a global one near the ends; keep its first listing only.
  earlier = jnp.tril(jnp.ones((slots.shape[-1],) * 2, bool), -1)[None, None, None]  # [1,1,1,S,S]
  repeated = ((slots[..., :, None] == slots[..., None, :]) & valid[..., None, :] & earlier).any(-1)
  return slots, valid & ~repeated, last


def bigbird_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, *, block: int,
                      num_random: int, scores: jax.Array) -> jax.Array:
  """Block-sparse attention over real keys (see `bigbird_layout` for the pattern).

  Args:
    q, k: [B,T,H,Dh]; v: [B,T,H,Dv]; mask: [B,T] bool, True on real tokens.
    block, num_random, scores: as in `bigbird_layout` (T is padded to whole blocks here).
  Returns:
    [B,T,H,Dv]; O(B T H (5+r) b D) time and memory, plus O(B H b T D) for the global rows and
    O(B H (T/b)^2) for ranking the random blocks.
  """
  length = q.shape[1]
  (q, _), (k, _), (v, real) = (pad_to_blocks(a, mask, block) for a in (q, k, v))
  b, padded, h, _ = q.shape
  slots, valid, last = bigbird_layout(real, block, num_random, scores)
  positions = (slots[..., None] * block + jnp.arange(block)[None, None, None, None]
               ).reshape(*slots.shape[:3], -1)                                 # [B,H,N,S*b]
  key_ok = valid[..., None].repeat(block, -1).reshape(positions.shape)
  key_ok &= jnp.take_along_axis(real[:, None, None, :], jnp.clip(positions, 0, padded - 1), -1)
  q_blocks = jnp.moveaxis(q.reshape(b, -1, block, h, q.shape[-1]), 3, 1)    # [B,H,N,Q,Dh]
  y, _ = gathered_attention(q_blocks, gather_positions(k, positions),
                            gather_positions(v, positions), key_ok[:, :, :, None, :])
  # The global blocks' queries see every real key.
  ends = jnp.stack([jnp.zeros_like(last), last], 1)                          # [B,2]
  q_ends = jnp.take_along_axis(q_blocks, ends[:, None, :, None, None], axis=2)
  y_ends, _ = gathered_attention(q_ends.reshape(b, h, 2 * block, -1), jnp.swapaxes(k, 1, 2),
                                 jnp.swapaxes(v, 1, 2), real[:, None, None, :])
  y_ends = y_ends.reshape(b, h, 2, block, -1)
  row = jnp.arange(y.shape[2])[None, None, :, None, None]
  y = jnp.where(row == last[:, None, None, None, None], y_ends[:, :, 1:], y)
  y = jnp.where(row == 0, y_ends[:, :, :1], y)
  return jnp.moveaxis(y, 1, 3).reshape(b, padded, h, -1)[:, :length]


class BigBirdMixer(nn.Module):
  """BigBird ITC (Zaheer et al. 2020): window, global and random blocks, O(T b) time and memory.

  Attributes:
    block: b, tokens per block (LRA code: 64).
    num_random: r, random key blocks per query block (LRA code: 3).
    seed: the random blocks come from fixed scores drawn from this seed folded with the layer's
      name: the same pattern in every call, training and evaluation, with no parameter stored.
  """
  dim: int
  num_heads: int
  max_len: int
  block: int = 64
  num_random: int = 3
  seed: int = 0

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    head_dim = self.dim // self.num_heads
    q, k, v = project_qkv(x, self.num_heads, head_dim)
    # Scores sized by max_len, not by this batch's T: a block's random partners then do not
    # change with the amount of padding.
    num_blocks = -(-max(self.max_len, x.shape[1]) // self.block)
    layer = zlib.crc32("/".join(self.scope.path).encode())
    key = jax.random.fold_in(jax.random.PRNGKey(self.seed), layer)
    scores = jax.random.uniform(key, (self.num_heads, num_blocks, num_blocks))
    y = bigbird_attention(q, k, v, mask, block=self.block, num_random=self.num_random,
                          scores=scores)
    return nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(y), carry
