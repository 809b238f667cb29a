"""Each mixer's pure core against a naive per-position formula, with padding."""
import numpy as np
import pytest

from models.mixers import latte, softmax

B, T, H, DH, L = 2, 7, 3, 4, 5


def _inputs(seed, last_dim_qk):
  rng = np.random.default_rng(seed)
  q = rng.normal(size=(B, T, H, last_dim_qk)).astype(np.float32) * 2
  k = rng.normal(size=(B, T, H, last_dim_qk)).astype(np.float32) * 2
  v = rng.normal(size=(B, T, H, DH)).astype(np.float32)
  mask = np.ones((B, T), bool)
  mask[1, 4:] = False  # second sequence has 4 real tokens
  # Huge values at pads would dominate any max or sum that wrongly includes them.
  k[1, 4:] = 50.0
  v[1, 4:] = 1e3
  return q, k, v, mask


def _naive_softmax(q, k, v, mask):
  out = np.zeros_like(v)
  for b in range(B):
    real = np.flatnonzero(mask[b])
    for h in range(H):
      for t in range(T):
        scores = np.array([q[b, t, h] @ k[b, s, h] for s in real]) / np.sqrt(q.shape[-1])
        w = np.exp(scores - scores.max())
        w /= w.sum()
        out[b, t, h] = sum(wi * v[b, s, h] for wi, s in zip(w, real))
  return out


def _naive_latte(q, k, v, mask):
  out = np.zeros_like(v)
  for b in range(B):
    real = np.flatnonzero(mask[b])
    for h in range(H):
      for t in range(T):
        p_l = np.exp(q[b, t, h] - q[b, t, h].max())
        p_l /= p_l.sum()
        for l in range(q.shape[-1]):
          logits = np.array([k[b, s, h, l] for s in real])
          p_s = np.exp(logits - logits.max())
          p_s /= p_s.sum()
          out[b, t, h] += p_l[l] * sum(ps * v[b, s, h] for ps, s in zip(p_s, real))
  return out


@pytest.mark.parametrize("core, naive, qk_dim", [
    (softmax.softmax_attention, _naive_softmax, DH),
    (latte.latte_attention, _naive_latte, L),
])
def test_core_matches_naive_formula(core, naive, qk_dim):
  q, k, v, mask = _inputs(0, qk_dim)
  got = np.asarray(core(q, k, v, mask))
  want = naive(q, k, v, mask)
  real = mask[:, :, None, None].repeat(H, 2).repeat(DH, 3)
  np.testing.assert_allclose(got[real], want[real], rtol=2e-5, atol=2e-5)
  assert np.isfinite(got).all()


def test_latte_is_not_softmax_over_all_positions():
  """Guards the test above: including pads in the time softmax must change real outputs."""
  q, k, v, mask = _inputs(1, L)
  with_pads = np.asarray(latte.latte_attention(q, k, v, np.ones_like(mask)))
  without = np.asarray(latte.latte_attention(q, k, v, mask))
  assert not np.allclose(with_pads[1, :4], without[1, :4], atol=1e-3)
