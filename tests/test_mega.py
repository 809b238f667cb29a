"""Mega-Chunk: the EMA against its recurrence, the chunked attention against dense attention."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models.mixers import mega

B, T, D, N = 2, 11, 3, 4


def _ema_parameters(seed):
  rng = np.random.default_rng(seed)
  p, alpha = rng.uniform(0.1, 0.9, (2, D, N)), rng.uniform(0.1, 0.9, (2, D, N))
  beta, gamma = rng.normal(size=(2, D, N)), rng.normal(size=(2, D, N))
  return p, alpha, beta, gamma


def _ema_recurrence(x, mask, p, alpha, beta, gamma):
  """h_t = (1 - p alpha) h_{t-1} + p beta x_t per component; y_t = gamma . h_t / sqrt(N); the
  backward direction runs the same recurrence from the last real token to the first."""
  y = np.zeros_like(x)
  for b in range(x.shape[0]):
    real = np.flatnonzero(mask[b])
    for direction, order in ((0, real), (1, real[::-1])):
      state = np.zeros((D, N))
      for t in order:
        state = (1 - p[direction] * alpha[direction]) * state + p[direction] * beta[direction] * \
            x[b, t][:, None]
        y[b, t] += (state * gamma[direction]).sum(-1) / np.sqrt(N)
  return y


def test_bidirectional_ema_equals_the_explicit_recurrence():
  p, alpha, beta, gamma = _ema_parameters(0)
  rng = np.random.default_rng(1)
  x = rng.normal(size=(B, T, D))
  mask = np.ones((B, T), bool)
  mask[1, 7:] = False
  x[1, 7:] = 1e3  # pads enter neither direction
  with jax.default_matmul_precision("highest"):  # the kernel sums its components by einsum
    kernels = [mega.ema_kernel(*(jnp.asarray(a[i], jnp.float32) for a in (p, alpha, beta, gamma)),
                               T) for i in (0, 1)]
    got = mega.bidirectional_ema(jnp.asarray(x, jnp.float32), mask, *kernels)
  want = _ema_recurrence(x, mask, p, alpha, beta, gamma)
  np.testing.assert_allclose(np.asarray(got) * mask[..., None], want * mask[..., None],
                             rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("chunk", [4, 11, 16])
def test_chunked_attention_equals_dense_attention_with_the_chunk_mask(chunk):
  rng = np.random.default_rng(2)
  q, k = rng.normal(size=(2, B, T, 5))
  v = rng.normal(size=(B, T, 6))
  mask = np.ones((B, T), bool)
  mask[1, 9:] = False
  k[1, 9:], v[1, 9:] = 50.0, 1e3
  table = rng.normal(size=(2 * chunk - 1,))
  size = min(chunk, T)
  with jax.default_matmul_precision("highest"):
    got = mega.chunked_attention(*(jnp.asarray(a, jnp.float32) for a in (q, k, v)), mask, size,
                                 mega.relative_bias(jnp.asarray(table, jnp.float32), size))
  centre = chunk - 1
  offsets = np.arange(T)[None, :] - np.arange(T)[:, None]
  block = np.arange(T) // size
  allowed = (block[:, None] == block[None, :])[None] & mask[:, None, :]
  scores = np.einsum("btz,bsz->bts", q, k) + table[np.clip(centre + offsets, 0, 2 * centre)]
  scores = np.where(allowed, scores, -np.inf)
  weights = np.exp(scores - scores.max(-1, keepdims=True))
  want = np.einsum("bts,bse->bte", weights / weights.sum(-1, keepdims=True), v)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_relative_bias_reads_the_table_by_offset():
  table = jnp.arange(7.0)  # c = 4: offsets -3..3 at indices 0..6
  bias = mega.relative_bias(table, 3)
  np.testing.assert_array_equal(bias, [[3, 4, 5], [2, 3, 4], [1, 2, 3]])
