"""Longformer, BigBird and Reformer against dense softmax attention restricted to the same pattern
(values and gradients, with pads), and each pattern against its definition written out here."""
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models.mixers.bigbird import BigBirdMixer, bigbird_attention, bigbird_layout
from lra.models.mixers.block_sparse import dense_pattern, pad_to_blocks
from lra.models.mixers.longformer import longformer_attention, longformer_layout
from lra.models.mixers.reformer import (ReformerMixer, lsh_buckets, reformer_attention,
                                        reformer_layout)

B, T, H, D = 2, 23, 2, 4
MASK = jnp.arange(T)[None, :] < jnp.array([[T], [14]])     # the second row ends in 9 pads
REAL = np.asarray(MASK)
# Compiled once per shape: the layouts run as many small ops, slow one by one.
_dense_pattern = jax.jit(dense_pattern, static_argnums=3)


def _inputs(count, seed=0):
  return [jax.random.normal(key, (B, T, H, D)) for key in jax.random.split(
      jax.random.PRNGKey(seed), count)]


def _dense(q, k, v, allowed):
  """Softmax attention over the keys `allowed` [B,H,T,T] marks (a count adds log(count))."""
  logits = jnp.einsum("bthd,bshd->bhts", q, k) * D ** -0.5
  logits = jnp.where(allowed > 0, logits + jnp.log(jnp.maximum(allowed, 1)),
                     jnp.finfo(jnp.float32).min)
  return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(logits, axis=-1), v)


def _same_values_and_gradients(fn, reference, inputs):
  """fn(*inputs) = reference(*inputs) on real rows, and so are the gradients of a loss on them."""
  weights = jax.random.normal(jax.random.PRNGKey(9), (B, T, H, D))

  def outputs_and_gradients(f):  # one compiled program each: eager dispatch is far slower
    def loss(*a):
      y = f(*a)
      return jnp.sum(jnp.where(MASK[..., None, None], y * weights, 0.0)), y
    return jax.jit(jax.grad(loss, tuple(range(len(inputs))), has_aux=True))(*inputs)

  with jax.default_matmul_precision("highest"):
    (g_ours, ours), (g_theirs, theirs) = map(outputs_and_gradients, (fn, reference))
  np.testing.assert_allclose(np.asarray(ours)[REAL], np.asarray(theirs)[REAL], atol=2e-6)
  for a, b in zip(g_ours, g_theirs):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
    assert not np.asarray(a)[~REAL].any()  # pads reach no real output


@pytest.mark.parametrize("window, num_global, block", [
    (5, 0, 64), (6, 3, 64), (64, 1, 64), (9, 1, 2)])  # (9, 1, 2): each side spans two blocks
def test_longformer_is_dense_attention_on_its_window_and_globals(window, num_global, block):
  left, right = window - window // 2 - 1, window // 2
  t, s = np.arange(T)[:, None], np.arange(T)[None, :]
  pattern = ((s - t >= -left) & (s - t <= right)) | (s < num_global)        # [T,T]
  _, query_pos, key_pos, layout = longformer_layout(T, window, num_global, block)
  counts = np.asarray(_dense_pattern(jnp.asarray(query_pos), jnp.asarray(key_pos),
                                     jnp.asarray(layout), T))
  np.testing.assert_array_equal(counts[num_global:], pattern[num_global:])  # each key once
  window_rows = pattern[None, None] & REAL[:, None, None, :]
  global_rows = np.broadcast_to(REAL[:, None, None, :], window_rows.shape)

  def reference(q, k, v, gq, gk, gv):
    is_global = (np.arange(T) < num_global)[None, :, None, None]
    return jnp.where(is_global, _dense(gq, gk, gv, global_rows), _dense(q, k, v, window_rows))

  fn = lambda q, k, v, gq, gk, gv: longformer_attention(
      q, k, v, MASK, window=window, num_global=num_global, global_qkv=(gq, gk, gv), block=block)
  _same_values_and_gradients(fn, reference, _inputs(6))


def _bigbird_pattern(block, num_random, scores):
  """BigBird's pattern from its definition: [B,H,T,T] bool, with the global rows full."""
  pattern = np.zeros((B, H, T, T), bool)
  for b in range(B):
    last = (REAL[b].nonzero()[0].max()) // block
    for h in range(H):
      for i in range(-(-T // block)):
        fixed = {j for j in (i - 1, i, i + 1, 0, last) if 0 <= j <= last}
        others = [j for j in range(last + 1) if j not in fixed]
        ranked = sorted(others, key=lambda j: -scores[h, i, j])[:num_random]
        for j in (range(last + 1) if i in (0, last) else fixed | set(ranked)):
          pattern[b, h, i * block:(i + 1) * block, j * block:(j + 1) * block] = True
  return pattern & REAL[:, None, None, :]


@pytest.mark.parametrize("block, num_random", [(3, 2), (5, 3)])
def test_bigbird_is_dense_attention_on_its_blocks(block, num_random):
  scores = np.asarray(jax.random.uniform(jax.random.PRNGKey(3), (H, 12, 12)))
  pattern = _bigbird_pattern(block, num_random, scores)
  _, real = pad_to_blocks(MASK, MASK, block)
  slots, valid, _ = jax.jit(bigbird_layout, static_argnums=(1, 2))(
      real, block, num_random, jnp.asarray(scores))
  n = slots.shape[2]
  key_pos = (slots[..., None] * block + jnp.arange(block)[None, None, None, None]).reshape(
      B, H, n, -1)
  allowed = jnp.broadcast_to(jnp.repeat(valid, block, axis=-1)[:, :, :, None, :],
                             (B, H, n, block, key_pos.shape[-1]))
  query_pos = jnp.broadcast_to(jnp.arange(n * block).reshape(n, block), (B, H, n, block))
  counts = np.asarray(_dense_pattern(query_pos, key_pos, allowed, T)) * REAL[:, None, None, :]
  rows = np.arange(T)[None, None, :, None] // block
  sparse_rows = (rows != 0) & (rows != (REAL.sum(1) - 1)[:, None, None, None] // block)
  np.testing.assert_array_equal(np.where(sparse_rows, counts, pattern), pattern)
  fn = lambda q, k, v: bigbird_attention(q, k, v, MASK, block=block, num_random=num_random,
                                         scores=jnp.asarray(scores))
  _same_values_and_gradients(fn, lambda q, k, v: _dense(q, k, v, pattern), _inputs(3))


def _brute_force_buckets(x, rotations):
  """Each token hashed on its own: argmax over [x R, -x R] per head and round."""
  x, rotations = np.asarray(x, np.float64), np.asarray(rotations, np.float64)
  out = np.zeros((x.shape[0], H, rotations.shape[2], x.shape[1]), int)
  for b, t, h, r in np.ndindex(x.shape[0], x.shape[1], H, rotations.shape[2]):
    projected = x[b, t, h] @ rotations[h, :, r]
    out[b, h, r, t] = np.argmax(np.concatenate([projected, -projected]))
  return out


def _reformer_pattern(buckets, chunk, before, after, across):
  """The union over rounds of each round's keys, from sorting real tokens by (bucket, position);
  keys of the query's own bucket only unless `across`; the query itself only when no round gives
  it another key."""
  pattern = np.zeros((B, H, T, T), bool)
  for b, h in np.ndindex(B, H):
    for r in range(buckets.shape[2]):
      order = sorted(REAL[b].nonzero()[0], key=lambda t: (buckets[b, h, r, t], t))
      chunk_of = {t: i // chunk for i, t in enumerate(order)}
      for t in order:
        keys = [s for s in order if s != t and -before <= chunk_of[s] - chunk_of[t] <= after
                and (across or buckets[b, h, r, s] == buckets[b, h, r, t])]
        pattern[b, h, t, keys] = True
    for t in REAL[b].nonzero()[0]:
      pattern[b, h, t, t] = not pattern[b, h, t].any()
  return pattern


def _alone_in_some_round_only(buckets, chunk, before, after):
  """How many real queries have no other key of their bucket in some round but do in another
  (the case where the self rule over all rounds differs from a rule per round)."""
  count = 0
  for b, h in np.ndindex(B, H):
    alone = []
    for r in range(buckets.shape[2]):
      order = sorted(REAL[b].nonzero()[0], key=lambda t: (buckets[b, h, r, t], t))
      chunk_of = {t: i // chunk for i, t in enumerate(order)}
      alone.append({t for t in order if not any(
          s != t and -before <= chunk_of[s] - chunk_of[t] <= after
          and buckets[b, h, r, s] == buckets[b, h, r, t] for s in order)})
    count += len(set.union(*alone) - set.intersection(*alone))
  return count


@pytest.mark.parametrize("across", [False, True], ids=["own_bucket", "across_buckets"])
@pytest.mark.parametrize("rounds, buckets, chunk, before, after", [
    (1, 4, 4, 1, 1), (2, 4, 3, 1, 1), (3, 4, 3, 1, 1), (2, 6, 2, 1, 0)])
def test_reformer_is_dense_attention_on_its_lsh_buckets(rounds, buckets, chunk, before, after,
                                                        across):
  qk, v = _inputs(2, seed=1)
  rotations = jax.random.normal(jax.random.PRNGKey(5), (H, D, rounds, buckets // 2))
  hashed = _brute_force_buckets(qk, rotations)
  np.testing.assert_array_equal(np.asarray(lsh_buckets(qk, rotations)), hashed)
  pattern = _reformer_pattern(hashed, chunk, before, after, across)
  if rounds > 1 and not across:  # the inputs meet the case the rule over all rounds is for
    assert _alone_in_some_round_only(hashed, chunk, before, after) > 0

  def reference(qk, v):
    keys = qk / jnp.linalg.norm(qk, axis=-1, keepdims=True)
    return _dense(qk, keys, v, pattern)

  fn = lambda qk, v: reformer_attention(qk, v, MASK, rotations, chunk=chunk, before=before,
                                        after=after, across_buckets=across)
  _same_values_and_gradients(fn, reference, [qk, v])


def _cross_bucket_fraction(qk, real, rotations, chunk, across):
  """Of the (query, key) pairs the layout allows, the fraction whose key is in another bucket of
  that round than the query."""
  buckets = lsh_buckets(qk, rotations)
  query_pos, key_pos, allowed, _ = jax.jit(functools.partial(
      reformer_layout, chunk=chunk, before=1, after=1, across_buckets=across))(buckets, real)
  at = lambda pos: jnp.take_along_axis(buckets, jnp.maximum(pos, 0).reshape(*pos.shape[:3], -1),
                                       -1).reshape(pos.shape)
  other = at(query_pos)[..., None] != at(key_pos)[..., None, :]
  return float((other & allowed).sum() / allowed.sum())


def test_reformer_attends_across_buckets_only_when_asked():
  """The chunk window brings keys of neighbouring buckets; the paper's rule drops them all."""
  qk, = _inputs(1, seed=3)
  rotations = jax.random.normal(jax.random.PRNGKey(7), (H, D, 2, 4))
  qk, real = pad_to_blocks(qk, MASK, 4)
  assert _cross_bucket_fraction(qk, real, rotations, 4, across=True) > 0.2
  assert _cross_bucket_fraction(qk, real, rotations, 4, across=False) == 0.0


@pytest.mark.usefixtures("highest_precision")  # y = 1 x v to f32 accuracy (TF32 would round v)
def test_reformer_lone_token_attends_to_itself():
  """With no other real token, in any round, a query's only key is itself: y = its value."""
  qk, v = _inputs(2, seed=4)
  mask = jnp.arange(T)[None, :] < jnp.array([[1], [2]])    # one real token; two
  rotations = jax.random.normal(jax.random.PRNGKey(8), (H, D, 2, 2))
  y = reformer_attention(qk, v, mask, rotations, chunk=4)
  np.testing.assert_allclose(np.asarray(y[0, 0]), np.asarray(v[0, 0]), rtol=1e-6)
  assert np.abs(np.asarray(y[1, :2] - v[1, :2])).max() > 1e-3  # two tokens see each other


@pytest.mark.parametrize("across", [False, True], ids=["own_bucket", "across_buckets"])
def test_reformer_counts_a_key_found_in_several_rounds_once(across):
  """The multiplicity each round divides by is the number of rounds whose pattern holds the pair
  (the dense counts summed over rounds)."""
  qk, = _inputs(1, seed=2)
  rotations = jax.random.normal(jax.random.PRNGKey(6), (H, D, 4, 2))
  qk, real = pad_to_blocks(qk, MASK, 3)
  layout = jax.jit(lambda x, m: reformer_layout(lsh_buckets(x, rotations), m, chunk=3, before=1,
                                                  after=1, across_buckets=across))
  query_pos, key_pos, allowed, multiplicity = layout(qk, real)
  counts = sum(_dense_pattern(query_pos[:, :, r], key_pos[:, :, r], allowed[:, :, r], 24)
               for r in range(4))                                             # [B,H,T,T]
  assert int(counts.max()) > 1  # some pairs do meet in several rounds
  at_pairs = lambda c, q, k: c[q[..., :, None], jnp.maximum(k, 0)[..., None, :]]
  expected = jax.vmap(jax.vmap(at_pairs))(counts, query_pos, key_pos)
  np.testing.assert_array_equal(np.asarray(multiplicity), np.where(allowed, expected, 0))


class _TwoLayers(nn.Module):
  cls: type

  @nn.compact
  def __call__(self, x, mask):
    first = self.cls(dim=8, num_heads=2, max_len=T, name="first")
    second = self.cls(dim=8, num_heads=2, max_len=T, name="second")
    return first(x, mask, deterministic=True)[0], second(x, mask, deterministic=True)[0]


@pytest.mark.parametrize("cls, settings", [(BigBirdMixer, dict(block=3, num_random=2)),
                                           (ReformerMixer, dict(num_buckets=4, chunk_len=3))])
def test_random_patterns_are_fixed_per_layer_and_differ_between_layers(cls, settings):
  """The random blocks / rotations are drawn from the seed and the layer's name: two layers with
  the same weights differ, and the same layer gives the same output every call."""
  model = _TwoLayers(functools.partial(cls, **settings))
  x = jax.random.normal(jax.random.PRNGKey(0), (B, T, 8))
  params = jax.jit(model.init)(jax.random.PRNGKey(1), x, MASK)
  shared = {"params": {"first": params["params"]["first"], "second": params["params"]["first"]}}
  first, second = jax.jit(model.apply)(shared, x, MASK)
  assert np.abs(np.asarray(first - second))[REAL].max() > 1e-4
  again, _ = jax.jit(model.apply)(shared, x, MASK)
  np.testing.assert_array_equal(np.asarray(first), np.asarray(again))
