"""Sparse Sinkhorn Attention (Tay et al. 2020): local blocks plus blocks sorted by a learned,
Sinkhorn-balanced soft permutation.

The sequence is cut into N blocks of b positions. A sorting network scores, for each block i,
every block j as its partner from block i's summed keys (R [N,N]); Sinkhorn balancing turns R/tau
into a (nearly) doubly stochastic P. Block i's queries attend to the real keys of their own block
and, in a second softmax, to the keys of the sorted block sum_j P[i,j] K_j; the two outputs are
added, as the LRA code adds them. Pads enter neither the block sums, nor the balancing (pad blocks'
rows and columns are left out), nor the sorted keys.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra.models.mixers.block_sparse import gathered_attention, pad_to_blocks
from lra.models.mixers.projections import project_qkv


def block_sums(x: jax.Array, mask: jax.Array, block: int) -> jax.Array:
  """x [B,T,H,D] summed over the real positions of each block of b -> [B,N,H,D], N = ceil(T/b)."""
  x, _ = pad_to_blocks(jnp.where(mask[..., None, None], x, 0.0), mask, block)
  return x.reshape(x.shape[0], -1, block, *x.shape[2:]).sum(axis=2)


def _log_normalise(x: jax.Array, allowed: jax.Array, axis: int) -> jax.Array:
  """x minus its log-sum-exp over the allowed entries along `axis` (an axis with none: minus 0)."""
  top = jnp.max(jnp.where(allowed, x, -jnp.inf), axis=axis, keepdims=True)
  top = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top), top, 0.0))
  total = jnp.sum(jnp.exp(jnp.where(allowed, x - top, -jnp.inf)), axis=axis, keepdims=True)
  return x - top - jnp.log(jnp.where(total > 0, total, 1.0))


def sinkhorn_balance(logits: jax.Array, real_blocks: jax.Array, *, iterations: int,
                     temperature: float) -> jax.Array:
  """The soft permutation: Sinkhorn balancing of exp(R / tau) over the real blocks.

  Args:
    logits: [B,H,N,N] sort scores R, row i for the block sorted to slot i, column j per block.
    real_blocks: [B,N] bool, blocks holding a real token.
    iterations: rounds of row then column normalisation (in the log domain); 0 normalises the
      rows once, a softmax (the LRA code's `sort_activation='softmax'`).
    temperature: tau.
  Returns:
    P [B,H,N,N] in float32, 0 in every row and column of a pad block.
  """
  allowed = real_blocks[:, None, :, None] & real_blocks[:, None, None, :]
  x = logits.astype(jnp.float32) / temperature
  if iterations == 0:
    x = _log_normalise(x, allowed, -1)
  for _ in range(iterations):  # the paper's S^k = F_c(F_r(S^(k-1))): rows, then columns
    x = _log_normalise(_log_normalise(x, allowed, -1), allowed, -2)
  return jnp.exp(jnp.where(allowed, x, -jnp.inf))


def sinkhorn_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                       sort_logits: jax.Array, *, block: int, iterations: int,
                       temperature: float) -> jax.Array:
  """Local attention within blocks plus attention to each block's soft-sorted partner block.

  Args:
    q, k: [B,T,H,Dh] queries and keys; v: [B,T,H,Dv] values.
    mask: [B,T] bool, True on real tokens.
    sort_logits: [B,H,N,N] R (N = ceil(T/b)), as in `sinkhorn_balance`.
    block: b; iterations, temperature: as in `sinkhorn_balance`.
  Returns:
    [B,T,H,Dv]: softmax over the real keys of t's block, plus softmax over the sorted block's
    slots (slot s: sum_j P[i,j] k_{j,s} with pads as zeros; a slot no real block fills is left
    out). Memory O(B H (T b + N^2)); time O(B H T (2b + N) D), the N from the soft sort.
  """
  length = q.shape[1]
  (q, _), (k, _), (v, real) = (pad_to_blocks(a, mask, block) for a in (q, k, v))
  b, padded, h, _ = q.shape
  n = padded // block
  blocks = lambda a: a.reshape(b, n, block, h, -1)
  real_tokens = real.reshape(b, n, block)
  heads_first = lambda a: jnp.moveaxis(blocks(a), 3, 1)
  y_local, _ = gathered_attention(heads_first(q), heads_first(k), heads_first(v),
                                  real_tokens[:, None, :, None, :])
  perm = sinkhorn_balance(sort_logits, real_tokens.any(-1), iterations=iterations,
                          temperature=temperature).astype(q.dtype)           # [B,H,N,N]
  # Pads as zeros, so a sorted slot mixes real keys and values only.
  zeroed = lambda a: blocks(jnp.where(real[:, :, None, None], a, 0.0))
  sorted_k = jnp.einsum("bhij,bjshd->bhisd", perm, zeroed(k))                # [B,H,N,b,Dh]
  sorted_v = jnp.einsum("bhij,bjshd->bhisd", perm, zeroed(v))
  slot_real = real_tokens.any(1)[:, None, None, None, :]                     # [B,1,1,1,b]
  y_sorted, _ = gathered_attention(heads_first(q), sorted_k, sorted_v, slot_real)
  y = y_local + y_sorted                                                     # [B,H,N,b,Dv]
  return jnp.moveaxis(y, 1, 3).reshape(b, padded, h, -1)[:, :length]


class SinkhornMixer(nn.Module):
  """Sparse Sinkhorn attention (Tay et al. 2020): local + soft-sorted blocks, O(T b + N^2) memory.

  Attributes:
    block: b, positions per block (LRA code: 50; its Image and Pathfinder configs: 64).
    iterations: Sinkhorn rounds (the paper's best: 7); 0 is a row softmax, the LRA code's setting.
    temperature: tau of the balanced exp(R / tau) (the paper's best: 0.75; LRA code: 1).
    gumbel_noise: in training, Gumbel noise on R (the paper's Gumbel-Sinkhorn); drawn from the
      'dropout' rng; none in evaluation.
  """
  dim: int
  num_heads: int
  max_len: int
  block: int = 50
  iterations: int = 7
  temperature: float = 0.75
  gumbel_noise: bool = True

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    head_dim = self.dim // self.num_heads
    q, k, v = project_qkv(x, self.num_heads, head_dim)
    n = -(-x.shape[1] // self.block)
    # One score per block the model's longest input has (LRA: a fixed 25), read up to this
    # batch's N: a real block's scores do not depend on how many pads follow it.
    slots = -(-max(self.max_len, x.shape[1]) // self.block)
    scores = nn.Dense(slots, use_bias=False, name="sort")(block_sums(k, mask, self.block))
    logits = jnp.transpose(scores[..., :n], (0, 2, 1, 3))                    # [B,H,N,N]
    if self.gumbel_noise and not deterministic:
      u = jax.random.uniform(self.make_rng("dropout"), logits.shape, jnp.float32,
                             minval=jnp.finfo(jnp.float32).tiny, maxval=1.0)
      logits = logits - jnp.log(-jnp.log(u)).astype(logits.dtype)
    y = sinkhorn_attention(q, k, v, mask, logits, block=self.block, iterations=self.iterations,
                           temperature=self.temperature)
    return nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(y), carry
