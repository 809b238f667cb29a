"""Local Attention, Sparse Transformer, Sinkhorn and Synthesizer: each core against a dense formula
written from its paper (values and gradients, with pads), and their patterns against their
definitions written out here. Every comparison is to f32 accuracy, so matmuls run at the highest
precision (TF32 on a GPU would round the inputs to ~1e-3)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra import errors
from lra.models.mixers.block_sparse import dense_pattern
from lra.models.mixers.local import local_attention
from lra.models.mixers.sinkhorn import SinkhornMixer, sinkhorn_attention, sinkhorn_balance
from lra.models.mixers.sparse import sparse_attention, sparse_layout, summary_offsets
from lra.models.mixers.synthesizer import SynthesizerMixer, synthesizer_attention

pytestmark = pytest.mark.usefixtures("highest_precision")

B, T, H, D = 2, 23, 2, 4
LENGTHS = (T, 14)                                          # the second row ends in 9 pads
MASK = jnp.arange(T)[None, :] < jnp.array([[LENGTHS[0]], [LENGTHS[1]]])
REAL = np.asarray(MASK)


def _inputs(count, seed=0):
  """q, k, v, ... [B,T,H,D], with huge keys and values at pads: a pad that leaks into a real
  output moves it far beyond the tolerance."""
  out = [np.array(jax.random.normal(key, (B, T, H, D))) for key in jax.random.split(
      jax.random.PRNGKey(seed), count)]
  for a in out[1:]:
    a[~REAL] = 50.0
  return [jnp.asarray(a) for a in out]


def _dense(q, k, v, allowed):
  """Softmax attention restricted to `allowed` [B,H,T,T] (rows with no key: 0)."""
  logits = jnp.einsum("bthd,bshd->bhts", q, k) * D ** -0.5
  logits = jnp.where(allowed, logits, -1e30)
  weights = jnp.where(allowed, jax.nn.softmax(logits, axis=-1), 0.0)
  return jnp.einsum("bhts,bshd->bthd", weights, v)


def _same_values_and_gradients(fn, reference, inputs, zero_at_pads=3):
  """fn(*inputs) = reference(*inputs) on real rows, and so are the gradients of a loss on them;
  the first `zero_at_pads` inputs ([B,T,...]) get no gradient at pads."""
  weights = jax.random.normal(jax.random.PRNGKey(9), (B, T, H, D))

  def outputs_and_gradients(f):
    def loss(*a):
      y = f(*a)
      return jnp.sum(jnp.where(MASK[..., None, None], y * weights, 0.0)), y
    return jax.jit(jax.grad(loss, tuple(range(len(inputs))), has_aux=True))(*inputs)

  (g_ours, ours), (g_theirs, theirs) = map(outputs_and_gradients, (fn, reference))
  np.testing.assert_allclose(np.asarray(ours)[REAL], np.asarray(theirs)[REAL], atol=2e-5)
  for i, (a, b) in enumerate(zip(g_ours, g_theirs)):
    assert np.isfinite(np.asarray(a)).all()
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-4)
    if i < zero_at_pads:
      assert not np.asarray(a)[~REAL].any()  # pads reach no real output


# --- Local Attention. ---------------------------------------------------------------------------

@pytest.mark.parametrize("block", [1, 4, 5, 23, 50])
def test_local_is_dense_attention_within_its_blocks(block):
  t, s = np.arange(T)[:, None], np.arange(T)[None, :]
  allowed = ((t // block) == (s // block))[None, None] & REAL[:, None, None, :]
  _same_values_and_gradients(lambda q, k, v: local_attention(q, k, v, MASK, block=block),
                             lambda q, k, v: _dense(q, k, v, allowed), _inputs(3))


# --- Sparse Transformer (fixed pattern, merged head, bidirectional). ----------------------------

def _fixed_pattern(block, summary, num_global):
  """The paper's A1 | A2 from their definitions, positions after the G global ones: [T,T]."""
  pattern = np.zeros((T, T), bool)
  for t in range(T):
    for s in range(T):
      if t < num_global or s < num_global:
        pattern[t, s] = True
        continue
      u, w = t - num_global, s - num_global
      same_block = u // block == w // block                                    # A1
      cell = w % block == 0 or w % block >= block - summary                    # A2, l mod l = 0
      pattern[t, s] = same_block or cell
  return pattern


@pytest.mark.parametrize("block, summary, num_global", [
    (4, 1, 0), (5, 2, 0), (4, 1, 1), (6, 3, 2), (3, 5, 0), (50, 10, 1)])
def test_sparse_is_dense_attention_on_the_fixed_pattern(block, summary, num_global):
  pattern = _fixed_pattern(block, summary, num_global)
  query_pos, shared_pos, shared_ok = sparse_layout(T, block, summary, num_global)
  n, q = query_pos.shape
  key_pos = np.concatenate([query_pos, np.broadcast_to(shared_pos, (n, shared_pos.size))], 1)
  layout = np.concatenate([np.broadcast_to(query_pos[:, None] < T, (n, q, q)),
                           np.broadcast_to(shared_ok[:, None], (n, q, shared_pos.size))], 2)
  counts = np.asarray(jax.jit(dense_pattern, static_argnums=3)(
      jnp.asarray(query_pos), jnp.asarray(key_pos), jnp.asarray(layout), T))
  # Each allowed key listed once for the blocked rows (the global rows are computed whole).
  np.testing.assert_array_equal(counts[num_global:], pattern[num_global:])
  allowed = pattern[None, None] & REAL[:, None, None, :]
  fn = lambda q, k, v: sparse_attention(q, k, v, MASK, block=block, summary=summary,
                                        num_global=num_global)
  _same_values_and_gradients(fn, lambda q, k, v: _dense(q, k, v, allowed), _inputs(3, seed=1))


def test_summary_cells_are_the_first_and_the_last_c_of_a_block():
  assert summary_offsets(50, 10).tolist() == [0, *range(40, 50)]
  assert summary_offsets(4, 1).tolist() == [0, 3]
  assert summary_offsets(3, 5).tolist() == [0, 1, 2]


# --- Sinkhorn. ----------------------------------------------------------------------------------

def _sinkhorn_reference(logits, real_blocks, iterations, temperature):
  """exp(R / tau) on real blocks, rows then columns divided by their sums (the paper's S^k);
  iterations 0: the rows once (a softmax)."""
  allowed = real_blocks[:, None, :, None] & real_blocks[:, None, None, :]
  e = jnp.where(allowed, jnp.exp(logits / temperature), 0.0)
  safe = lambda total: jnp.where(total > 0, total, 1.0)
  for _ in range(max(iterations, 1)):
    e = e / safe(e.sum(-1, keepdims=True))
    if iterations:
      e = e / safe(e.sum(-2, keepdims=True))
  return e


@pytest.mark.parametrize("iterations", [0, 1, 7])
def test_sinkhorn_balancing_is_the_papers_normalisation_over_real_blocks(iterations):
  n = 6
  logits = jax.random.normal(jax.random.PRNGKey(2), (B, H, n, n)) * 2
  real_blocks = jnp.array([[True] * n, [True] * 4 + [False] * 2])
  got = np.asarray(sinkhorn_balance(logits, real_blocks, iterations=iterations, temperature=0.75))
  want = np.asarray(_sinkhorn_reference(logits, real_blocks, iterations, 0.75))
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  assert not got[1, :, 4:].any() and not got[1, :, :, 4:].any()  # pad blocks: no row, no column
  # The last normalisation is exact: the rows' (a softmax) or the columns' (Sinkhorn).
  np.testing.assert_allclose(got[1, :, :4, :4].sum(-1 if iterations == 0 else -2), 1.0,
                             rtol=1e-5)


def _sinkhorn_attention_reference(q, k, v, logits, block, iterations, temperature):
  """Per query t in block i: softmax over the real keys of block i, plus softmax over the slots
  of sorted block i, slot s = sum_j P[i,j] k_{j b + s} (pads as zeros; a slot no real block fills
  left out)."""
  n = -(-T // block)
  padded = n * block
  real = np.zeros((B, padded), bool)
  real[:, :T] = REAL
  real_blocks = jnp.asarray(real.reshape(B, n, block).any(-1))
  perm = _sinkhorn_reference(logits, real_blocks, iterations, temperature)    # [B,H,N,N]
  pad = lambda a: jnp.pad(jnp.where(MASK[..., None, None], a, 0.0),
                          ((0, 0), (0, padded - T), (0, 0), (0, 0)))
  kb, vb = (pad(a).reshape(B, n, block, H, D) for a in (k, v))
  sorted_k = jnp.einsum("bhij,bjshd->bishd", perm, kb).reshape(B, padded, H, D)
  sorted_v = jnp.einsum("bhij,bjshd->bishd", perm, vb).reshape(B, padded, H, D)
  t, s = np.arange(T)[:, None], np.arange(padded)[None, :]
  local = ((t // block) == (s[:, :T] // block))[None, None] & REAL[:, None, None, :]
  slot_filled = real.reshape(B, n, block).any(1)                               # [B,b]
  in_sorted_block = (t // block) == (s // block)                               # [T,T']
  sorted_allowed = in_sorted_block[None, None] & np.tile(slot_filled, n)[:, None, None, :]
  logits_sorted = jnp.einsum("bthd,bshd->bhts", q, sorted_k) * D ** -0.5
  weights = jnp.where(sorted_allowed, jax.nn.softmax(
      jnp.where(sorted_allowed, logits_sorted, -1e30), axis=-1), 0.0)
  return _dense(q, k, v, local) + jnp.einsum("bhts,bshd->bthd", weights, sorted_v)


@pytest.mark.parametrize("block, iterations, temperature", [
    (4, 7, 0.75), (5, 0, 1.0), (3, 2, 0.5)])
def test_sinkhorn_is_local_plus_sorted_block_attention(block, iterations, temperature):
  q, k, v = _inputs(3, seed=2)
  n = -(-T // block)
  logits = jax.random.normal(jax.random.PRNGKey(4), (B, H, n, n)) * 2
  fn = lambda q, k, v, r: sinkhorn_attention(q, k, v, MASK, r, block=block,
                                             iterations=iterations, temperature=temperature)
  reference = lambda q, k, v, r: _sinkhorn_attention_reference(q, k, v, r, block, iterations,
                                                               temperature)
  _same_values_and_gradients(fn, reference, [q, k, v, logits])


def test_sinkhorn_noise_is_drawn_in_training_only():
  x = jax.random.normal(jax.random.PRNGKey(0), (B, T, 8))
  noisy = SinkhornMixer(dim=8, num_heads=2, max_len=T, block=4)
  quiet = SinkhornMixer(dim=8, num_heads=2, max_len=T, block=4, gumbel_noise=False)

  @jax.jit
  def outputs(x):  # one program: the eval and training outputs under two keys, and quiet's
    params = noisy.init(jax.random.PRNGKey(1), x, MASK, deterministic=True)
    run = lambda module, seed, deterministic: module.apply(
        params, x, MASK, deterministic=deterministic,
        rngs={"dropout": jax.random.PRNGKey(seed)})[0]
    return run(noisy, 0, True), run(noisy, 0, False), run(noisy, 1, False), run(quiet, 0, False)

  evaluation, train0, train1, quiet_train = map(np.asarray, outputs(x))
  assert np.abs(train0 - train1)[REAL].max() > 1e-4
  np.testing.assert_array_equal(quiet_train, evaluation)


# --- Synthesizer. -------------------------------------------------------------------------------

@pytest.mark.parametrize("query_chunk", [0, 8], ids=["one_piece", "query_chunks"])
@pytest.mark.parametrize("batched", [False, True], ids=["shared_table", "per_example"])
@pytest.mark.parametrize("dot_product", [True, False], ids=["random+dot", "synthetic_only"])
def test_synthesizer_is_softmax_of_synthetic_plus_dot_product_logits(dot_product, batched,
                                                                      query_chunk):
  """In one piece and in query chunks (8 does not divide T: the last chunk is padded), for a
  table shared by the batch (random) and one per example (dense)."""
  q, k, v = _inputs(3, seed=3)
  synthetic = jax.random.normal(jax.random.PRNGKey(6), (B if batched else 1, H, T, T)) * 2

  def reference(q, k, v, s):
    logits = s + (jnp.einsum("bthd,bshd->bhts", q, k) * D ** -0.5 if dot_product else 0.0)
    allowed = np.broadcast_to(REAL[:, None, None, :], (B, H, T, T))
    weights = jnp.where(allowed, jax.nn.softmax(jnp.where(allowed, logits, -1e30), -1), 0.0)
    return jnp.einsum("bhts,bshd->bthd", weights, v)

  fn = lambda q, k, v, s: synthesizer_attention(v, MASK, s, q if dot_product else None,
                                                k if dot_product else None,
                                                query_chunk=query_chunk)
  _same_values_and_gradients(fn, reference, [q, k, v, synthetic])


@pytest.mark.parametrize("mode", ["random", "factorized_random", "dense"])
def test_synthesizer_logits_are_read_at_absolute_positions(mode):
  """A real row's synthetic logits are those of its positions, whatever the input's length up to
  max_length: the output of a sequence does not change when pads are appended, and an input
  longer than max_length is refused with the setting that fixes it."""
  module = SynthesizerMixer(dim=8, num_heads=2, max_len=T + 9, mode=mode, rank=3)
  x = jax.random.normal(jax.random.PRNGKey(0), (B, T, 8))
  params = jax.jit(lambda x: module.init(jax.random.PRNGKey(1), x, MASK, deterministic=True))(x)
  apply = jax.jit(lambda x, mask: module.apply(params, x, mask, deterministic=True)[0])
  longer = jnp.concatenate([x, jnp.ones((B, 9, 8))], 1)
  y = np.asarray(apply(x, MASK))
  y_longer = np.asarray(apply(longer, jnp.concatenate([MASK, jnp.zeros((B, 9), bool)], 1)))
  np.testing.assert_allclose(y_longer[:, :T][REAL], y[REAL], atol=1e-6)
  with pytest.raises(errors.BadValue, match="max_length=33"):
    apply(jnp.ones((1, T + 10, 8)), jnp.ones((1, T + 10), bool))
