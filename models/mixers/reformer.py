"""Reformer's LSH attention (Kitaev et al. 2020), bidirectional, with shared queries and keys.

Per hash round, each token's shared query/key vector x is hashed by a fixed random rotation R:
bucket = argmax([xR, -xR]). Tokens are sorted by (bucket, position), cut into chunks of c, and
each chunk attends to itself and its neighbour chunks in that order, to the keys of the query's
own bucket only (the paper's P_i = {j : h(q_i) = h(k_j)}; `across_buckets` keeps every key in
the window, as the LRA code did). A token attends to itself only when it has no other key in any
round. Rounds are combined as one softmax over the union of their keys (a key found in several
rounds counts once, the paper's multi-round attention).
"""
from __future__ import annotations

import zlib

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import errors
from lra.models.mixers.block_sparse import gather_positions, gathered_attention, pad_to_blocks


def lsh_buckets(x: jax.Array, rotations: jax.Array) -> jax.Array:
  """Angular LSH: x [B,T,H,Dh], rotations [H,Dh,R,nb/2] -> buckets [B,H,R,T] in [0, nb)."""
  rotated = jnp.einsum("bthd,hdri->bhrti", x, rotations)
  return jnp.argmax(jnp.concatenate([rotated, -rotated], axis=-1), axis=-1)


def reformer_layout(buckets: jax.Array, mask: jax.Array, *, chunk: int, before: int,
                    after: int, across_buckets: bool = False
                    ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """Sorts each round into chunks and says which keys each query sees.

  Args:
    buckets: [B,H,R,T] per round, T a multiple of `chunk`.
    mask: [B,T] bool; pads are sorted after every real token, so the chunks of real tokens do not
      depend on how many pads follow.
    chunk: c, tokens per chunk; before, after: neighbour chunks attended on each side.
    across_buckets: a query sees every real key of its chunk window; False: only those of its
      own bucket in that round.
  Returns:
    query_pos [B,H,R,N,c] and key_pos [B,H,R,N,K] (original positions, -1 beyond the ends;
    K = (before + 1 + after) c), allowed [B,H,R,N,c,K], and the multiplicity [B,H,R,N,c,K] of
    each allowed pair over all rounds. A real query's row may be empty in a round where it has
    no key but itself while it has others in another round.
  """
  bsz, heads, rounds, length = buckets.shape
  order = jnp.argsort(jnp.where(mask[:, None, None], buckets, jnp.iinfo(jnp.int32).max), -1,
                      stable=True)                                            # sorted -> original
  rank = jnp.argsort(order, -1)                                               # original -> sorted
  n = length // chunk
  query_pos = order.reshape(bsz, heads, rounds, n, chunk)
  slots = jnp.arange(n)[:, None] * chunk + jnp.arange(-before * chunk, (after + 1) * chunk)[None]
  inside = ((slots >= 0) & (slots < length))[None, None, None]               # [1,1,1,N,K]
  key_pos = jnp.take(order, jnp.clip(slots, 0, length - 1), axis=-1)
  key_pos = jnp.where(inside, key_pos, -1)                                    # [B,H,R,N,K]
  key_real = inside & jnp.take_along_axis(mask[:, None, None, None], jnp.maximum(key_pos, 0), -1)

  def across_rounds(per_round, pos):  # [B,H,R',T] at pos [B,H,R,N,X] -> [B,H,R',R,N,X]
    idx = jnp.maximum(pos, 0).reshape(bsz, heads, 1, -1)
    return jnp.take_along_axis(per_round, idx, -1).reshape(bsz, heads, rounds, *pos.shape[2:])

  def pair_diff(per_round):  # [B,H,R',T] -> key minus query value [B,H,R',R,N,c,K]
    return (across_rounds(per_round, key_pos)[..., None, :]
            - across_rounds(per_round, query_pos)[..., None])

  candidate = jnp.broadcast_to(key_real[..., None, :], (*query_pos.shape, key_pos.shape[-1]))
  if not across_buckets:
    sorted_buckets = jnp.take_along_axis(buckets, order, -1)                  # [B,H,R,T]
    key_bucket = jnp.take(sorted_buckets, jnp.clip(slots, 0, length - 1), axis=-1)
    candidate &= sorted_buckets.reshape(query_pos.shape)[..., None] == key_bucket[..., None, :]
  is_self = key_pos[..., None, :] == query_pos[..., None]
  others = candidate & ~is_self
  # Self only for a query with no other key in any round (trax masks self with a large finite
  # penalty in every round: a round where the query is alone then weighs nothing beside one
  # where it is not).
  has_other = jnp.take_along_axis(others.any(-1).reshape(bsz, heads, rounds, length), rank, -1)
  alone = ~jnp.any(has_other, axis=2, keepdims=True)                          # [B,H,1,T]
  alone_q = jnp.take_along_axis(jnp.broadcast_to(alone, buckets.shape),
                                jnp.maximum(query_pos, 0).reshape(bsz, heads, rounds, -1),
                                -1).reshape(query_pos.shape)
  allowed = others | (candidate & is_self & alone_q[..., None])
  if rounds == 1:
    return query_pos, key_pos, allowed, allowed.astype(jnp.int32)
  # A pair's multiplicity: in how many rounds r' the key is within the query's chunk window (and
  # its bucket, unless across_buckets); the self pair only counts for a query alone everywhere.
  distance = pair_diff(rank // chunk)                                        # [B,H,R',R,N,c,K]
  member = (distance >= -before) & (distance <= after)
  if not across_buckets:
    member &= pair_diff(buckets) == 0
  return query_pos, key_pos, allowed, jnp.where(allowed, member.sum(2), 0)


def reformer_attention(qk: jax.Array, v: jax.Array, mask: jax.Array, rotations: jax.Array, *,
                       chunk: int, before: int = 1, after: int = 1,
                       normalize_keys: bool = True, across_buckets: bool = False) -> jax.Array:
  """Multi-round LSH attention over real keys, in chunks of the bucket-sorted sequence.

  Args:
    qk: [B,T,H,Dh] shared queries and keys (keys are qk / |qk| with `normalize_keys`).
    v: [B,T,H,Dv] values.
    mask: [B,T] bool, True on real tokens.
    rotations: [H,Dh,R,nb/2] the fixed random rotations, R hash rounds of nb buckets.
    chunk, before, after, across_buckets: as in `reformer_layout`.
  Returns:
    [B,T,H,Dv]; O(B H R T log T) for the sorts, O(B H R T (before+1+after) c D) for the chunks.
  """
  length = qk.shape[1]
  (qk, _), (v, real) = pad_to_blocks(qk, mask, chunk), pad_to_blocks(v, mask, chunk)
  query_pos, key_pos, allowed, multiplicity = reformer_layout(
      lsh_buckets(qk, rotations), real, chunk=chunk, before=before, after=after,
      across_buckets=across_buckets)
  k = qk / jnp.maximum(jnp.linalg.norm(qk, axis=-1, keepdims=True), 1e-6) if normalize_keys else qk
  offset = -jnp.log(jnp.maximum(multiplicity, 1).astype(qk.dtype))
  y, log_norm = gathered_attention(gather_positions(qk, query_pos), gather_positions(k, key_pos),
                                   gather_positions(v, key_pos), allowed, offset)
  # Back to original order, then each round weighted by its share of the union's normaliser.
  bsz, heads, rounds = query_pos.shape[:3]
  rank = jnp.argsort(query_pos.reshape(bsz, heads, rounds, -1), -1)
  back = lambda a: jnp.take_along_axis(a.reshape(bsz, heads, rounds, -1), rank, -1)  # noqa: E731
  y = jnp.take_along_axis(y.reshape(bsz, heads, rounds, -1, y.shape[-1]), rank[..., None], 3)
  share = _round_shares(back(log_norm), back(allowed.any(-1)))
  y = jnp.sum(share[..., None] * y, axis=2)                                  # [B,H,T,Dv]
  return jnp.swapaxes(y, 1, 2)[:, :length]


def _round_shares(log_norm: jax.Array, has_key: jax.Array) -> jax.Array:
  """Softmax over rounds (axis 2) of [B,H,R,T] log-normalisers, rounds without a key left out:
  they hold no term of the union (a pad's row may have none in any round: all shares 0)."""
  top = jnp.max(jnp.where(has_key, log_norm, -jnp.inf), axis=2, keepdims=True)
  top = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top), top, 0.0))
  weights = jnp.exp(jnp.where(has_key, log_norm - top, -jnp.inf))
  total = jnp.sum(weights, axis=2, keepdims=True)
  return weights / jnp.where(total > 0, total, 1.0)


class ReformerMixer(nn.Module):
  """Reformer LSH attention (Kitaev et al. 2020), shared QK: O(T log T) time, O(T c) memory.

  Attributes:
    num_hashes: R, hash rounds.
    num_buckets: nb (even), buckets per round.
    chunk_len: c, tokens per chunk of the sorted sequence.
    chunks_before, chunks_after: neighbour chunks each chunk attends to.
    normalize_keys: keys are the unit-length shared vectors (the paper); False uses them as is.
    attend_across_buckets: a query attends to every key of its chunk window (the LRA code);
      False: only to those in its own bucket (the paper's Reformer).
    seed: the rotations are drawn from this seed folded with the layer's name: fixed, one per
      layer and head, never trained or stored.
  """
  dim: int
  num_heads: int
  max_len: int
  num_hashes: int = 1
  num_buckets: int = 32
  chunk_len: int = 64
  chunks_before: int = 1
  chunks_after: int = 1
  normalize_keys: bool = True
  attend_across_buckets: bool = False
  seed: int = 0

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    if self.num_buckets % 2:
      raise errors.BadValue("reformer: num_buckets must be even (buckets are argmax over [xR, "
                            f"-xR]), got {self.num_buckets}. Set "
                            "--config.mixers.reformer.num_buckets.")
    head_dim = self.dim // self.num_heads
    qk, v = jnp.split(nn.DenseGeneral((2, self.num_heads, head_dim), name="qkv")(x), 2, axis=2)
    layer = zlib.crc32("/".join(self.scope.path).encode())
    key = jax.random.fold_in(jax.random.PRNGKey(self.seed), layer)
    rotations = jax.random.normal(
        key, (self.num_heads, head_dim, self.num_hashes, self.num_buckets // 2))
    y = reformer_attention(qk.squeeze(2), v.squeeze(2), mask, rotations, chunk=self.chunk_len,
                           before=self.chunks_before, after=self.chunks_after,
                           normalize_keys=self.normalize_keys,
                           across_buckets=self.attend_across_buckets)
    return nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(y), carry
