"""Each mixer's pure core against a naive per-position formula, with padding."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models.mixers import (latte, latte_macchiato, latte_rglru, linear, linformer, luna,
                               performer, softmax)

B, T, H, DH, L = 2, 7, 3, 4, 5
# Every test here compares with a formula to f32 accuracy.
pytestmark = pytest.mark.usefixtures("highest_precision")


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
        for l in range(q.shape[-1]):  # noqa: E741 - l indexes the L latents (the shape letter L of the docstrings)
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


def test_softmax_in_query_chunks_matches_the_naive_formula_and_its_gradients():
  """query_chunk=3 on T=7: two full chunks and a padded one; values and gradients of all three
  inputs as in one piece (the chunks recompute their weights in the backward pass)."""
  q, k, v, mask = _inputs(2, DH)
  chunked = np.asarray(softmax.softmax_attention(q, k, v, mask, query_chunk=3))
  real = mask[:, :, None, None].repeat(H, 2).repeat(DH, 3)
  np.testing.assert_allclose(chunked[real], _naive_softmax(q, k, v, mask)[real], rtol=2e-5,
                             atol=2e-5)
  cotangent = np.random.default_rng(3).normal(size=v.shape).astype(np.float32) * real

  def loss(chunk):
    return lambda q, k, v: jnp.sum(softmax.softmax_attention(q, k, v, mask, query_chunk=chunk)
                                   * cotangent)
  for got, want in zip(jax.grad(loss(3), argnums=(0, 1, 2))(q, k, v),
                       jax.grad(loss(0), argnums=(0, 1, 2))(q, k, v)):
    assert np.abs(np.asarray(want)).max() > 1e-3
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_latte_is_not_softmax_over_all_positions():
  """Guards the test above: including pads in the time softmax must change real outputs."""
  q, k, v, mask = _inputs(1, L)
  with_pads = np.asarray(latte.latte_attention(q, k, v, np.ones_like(mask)))
  without = np.asarray(latte.latte_attention(q, k, v, mask))
  assert not np.allclose(with_pads[1, :4], without[1, :4], atol=1e-3)


@pytest.mark.parametrize("bias", [False, True])
def test_latte_mixer_projections_with_and_without_bias(bias):
  """LatteMixer = out(latte(x Wq + bq, x Wk + bk, x Wv + bv)) + bo, per head; with bias=False (the
  paper's and the authors' code) there are no bias parameters at all."""
  d, heads, latents = 6, 2, 4
  x = np.random.default_rng(13).normal(size=(B, T, d)).astype(np.float32)
  mask = np.ones((B, T), bool)
  mask[1, 4:] = False
  module = latte.LatteMixer(dim=d, num_heads=heads, max_len=T, num_latents=latents, bias=bias)
  params = module.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
  has_bias = ["bias" in layer for layer in params["params"].values()]
  assert has_bias == [bias, bias]
  # Biases start at zero; random ones make a bias the code forgot to add visible.
  rng = np.random.default_rng(14)
  params = jax.tree_util.tree_map_with_path(
      lambda path, a: a + rng.normal(size=a.shape).astype(np.float32)
      if path[-1].key == "bias" else a, params)
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params["params"])
  qkv = np.einsum("btd,dhe->bthe", x, p["qkv"]["kernel"]) + p["qkv"].get("bias", 0.0)
  per_head = latents // heads
  q, k, v = qkv[..., :per_head], qkv[..., per_head:2 * per_head], qkv[..., 2 * per_head:]
  mixed = np.zeros(v.shape)
  for b in range(B):
    real = np.flatnonzero(mask[b])
    for h in range(heads):
      p_s = np.exp(k[b, real, h] - k[b, real, h].max(0))                # [S,L]
      states = (p_s / p_s.sum(0)).T @ v[b, real, h]                     # [L,Dh]
      p_l = np.exp(q[b, :, h] - q[b, :, h].max(-1, keepdims=True))
      mixed[b, :, h] = (p_l / p_l.sum(-1, keepdims=True)) @ states
  want = np.einsum("bthe,hed->btd", mixed, p["out"]["kernel"]) + p["out"].get("bias", 0.0)
  got = np.asarray(module.apply(params, x, mask, deterministic=True)[0])
  np.testing.assert_allclose(got[mask], want[mask], rtol=1e-4, atol=1e-5)


def _real(mask, last_dim):
  return mask[:, :, None, None].repeat(H, 2).repeat(last_dim, 3)


def _naive_kernel_attention(phi_q, phi_k, v, mask):
  """out_t = sum_s (phi_q_t . phi_k_s) v_s / sum_s phi_q_t . phi_k_s over real s, per head."""
  out = np.zeros(v.shape, np.float64)
  for b in range(B):
    real = np.flatnonzero(mask[b])
    for h in range(H):
      for t in range(v.shape[1]):
        w = np.array([phi_q[b, t, h] @ phi_k[b, s, h] for s in real])
        out[b, t, h] = sum(wi * v[b, s, h] for wi, s in zip(w, real)) / w.sum()
  return out


def test_linear_matches_naive_formula():
  q, k, v, mask = _inputs(2, DH)
  elu1 = lambda x: np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))
  want = _naive_kernel_attention(elu1(q.astype(np.float64)), elu1(k.astype(np.float64)), v, mask)
  got = np.asarray(linear.linear_attention(q, k, v, mask))
  np.testing.assert_allclose(got[_real(mask, DH)], want[_real(mask, DH)], rtol=2e-5, atol=2e-5)


def test_performer_matches_its_estimator_for_fixed_features():
  """Given the features W, the output is exactly the FAVOR+ ratio estimator (pads excluded)."""
  q, k, v, mask = _inputs(3, DH)
  q, k = q * 0.3, np.where(mask[:, :, None, None], k * 0.3, k)  # pads keep their huge keys
  features = np.asarray(performer.orthogonal_features(jax.random.PRNGKey(0), 12, DH))

  def phi(x):
    x = x.astype(np.float64) * DH ** -0.25
    return np.exp(x @ features.T - 0.5 * np.sum(x * x, -1, keepdims=True)) / np.sqrt(12)

  want = _naive_kernel_attention(phi(q), phi(k), v, mask)
  got = np.asarray(performer.performer_attention(q, k, v, mask, features))
  np.testing.assert_allclose(got[_real(mask, DH)], want[_real(mask, DH)], rtol=1e-4, atol=1e-5)
  # The LRA code's kernel: relu(x) + 1e-3 on the head dimensions, no random features.
  relu = lambda x: np.maximum(x.astype(np.float64), 0.0) + performer.RELU_EPSILON
  want = _naive_kernel_attention(relu(q), relu(k), v, mask)
  got = np.asarray(performer.performer_attention(q, k, v, mask, None, kernel="relu"))
  np.testing.assert_allclose(got[_real(mask, DH)], want[_real(mask, DH)], rtol=1e-4, atol=1e-5)


def test_orthogonal_features_are_orthogonal_within_blocks():
  w = np.asarray(performer.orthogonal_features(jax.random.PRNGKey(1), 10, 4))
  assert w.shape == (10, 4)
  unit = w / np.linalg.norm(w, axis=1, keepdims=True)
  for start in (0, 4):
    np.testing.assert_allclose(unit[start:start + 4] @ unit[start:start + 4].T, np.eye(4),
                               atol=1e-5)


def test_performer_error_shrinks_as_features_grow():
  """Stated tolerance: with |q|,|k| ~ 0.5 sqrt(Dh), 512 features give an RMS error under 15% of
  the RMS of exact softmax attention (mean over 8 feature draws); more features, less error."""
  rng = np.random.default_rng(4)
  t, dh = 16, 8
  q, k = (rng.normal(size=(B, t, H, dh)).astype(np.float32) * 0.5 for _ in range(2))
  v = rng.normal(size=(B, t, H, dh)).astype(np.float32)
  mask = np.ones((B, t), bool)
  mask[1, 10:] = False
  k[1, 10:] = 50.0
  exact = np.asarray(softmax.softmax_attention(q, k, v, mask))[mask]
  keys = jax.random.split(jax.random.PRNGKey(4), 8)

  @jax.jit
  def rms_errors(features):  # [draws,L,Dh] -> [draws]
    out = jax.vmap(lambda w: performer.performer_attention(q, k, v, mask, w))(features)
    return jnp.sqrt(jnp.mean((out[:, mask] - exact[None]) ** 2, axis=(1, 2, 3)))

  errors = []
  for num_features in (8, 64, 512):
    draws = jax.vmap(lambda key: performer.orthogonal_features(key, num_features, dh))(keys)
    errors.append(float(jnp.mean(rms_errors(draws))))
  assert errors[0] > errors[1] > errors[2], errors
  assert errors[2] < 0.15 * np.sqrt(np.mean(exact ** 2)), errors


def test_performer_kernel_estimate_is_unbiased():
  """phi(q).phi(k) estimates exp(q.k / sqrt(Dh)) with error falling like 1/sqrt(L): x16 features,
  about /4 error. Biased directions (QR without sign fix) stall near 9% at Dh=8 from L=4096 on."""
  rng = np.random.default_rng(10)
  dh = 8
  q, k = (rng.normal(size=(16, dh)) * 0.5 for _ in range(2))
  exact = np.exp(q @ k.T / np.sqrt(dh))

  def relative_error(num_features, seed):
    w = np.asarray(performer.orthogonal_features(jax.random.PRNGKey(seed), num_features, dh),
                   np.float64)
    phi = lambda x: np.exp((x * dh ** -0.25) @ w.T - 0.5 * np.sum(x * x, -1, keepdims=True)
                           / np.sqrt(dh)) / np.sqrt(num_features)
    return np.sqrt(np.mean((phi(q) @ phi(k).T / exact - 1.0) ** 2))

  errors = [np.mean([relative_error(n, s) for s in range(3)]) for n in (64, 4096, 65536)]
  assert errors[1] < errors[0] / 3 and errors[2] < errors[1] / 2.5, errors
  assert errors[2] < 0.02, errors


def test_orthogonal_feature_directions_are_uniform():
  """Each row of a block is uniform on the sphere: over 4000 blocks its mean is 0 and its second
  moment I/Dh, within 5 standard errors (a sign-biased QR puts -0.25 on the diagonal)."""
  dh, blocks = 8, 4000
  w = np.asarray(performer.orthogonal_features(jax.random.PRNGKey(11), blocks * dh, dh))
  unit = (w / np.linalg.norm(w, axis=1, keepdims=True)).reshape(blocks, dh, dh)  # [N,row,coord]
  standard_error = np.sqrt(1.0 / dh / blocks)
  assert np.abs(unit.mean(0)).max() < 5 * standard_error, unit.mean(0)
  second = np.einsum("nri,nrj->rij", unit, unit) / blocks                         # [row,Dh,Dh]
  # Var(u_i u_j) <= E[u_i^2 u_j^2] <= 3 / (Dh (Dh + 2)) on the sphere.
  tolerance = 5 * np.sqrt(3.0 / (dh * (dh + 2)) / blocks)
  np.testing.assert_allclose(second, np.broadcast_to(np.eye(dh) / dh, second.shape),
                             atol=tolerance)


def test_linformer_matches_naive_formula():
  q, k, v, mask = _inputs(5, DH)
  rng = np.random.default_rng(5)
  e, f = (rng.normal(size=(T, H, L)).astype(np.float32) for _ in range(2))
  want = np.zeros(v.shape)
  for b in range(B):
    real = np.flatnonzero(mask[b])
    for h in range(H):
      k_proj = sum(np.outer(e[s, h], k[b, s, h]) for s in real)      # [L,Dh]
      v_proj = sum(np.outer(f[s, h], v[b, s, h]) for s in real)
      for t in range(T):
        scores = k_proj @ q[b, t, h] / np.sqrt(DH)
        w = np.exp(scores - scores.max())
        want[b, t, h] = (w / w.sum()) @ v_proj
  got = np.asarray(linformer.linformer_attention(q, k, v, mask, e, f))
  np.testing.assert_allclose(got[_real(mask, DH)], want[_real(mask, DH)], rtol=1e-4, atol=1e-4)


def test_luna_matches_naive_formula():
  q, k, v, mask = _inputs(6, DH)
  rng = np.random.default_rng(6)
  packed_q = rng.normal(size=(B, L, H, DH)).astype(np.float32)
  w_k, w_v = (rng.normal(size=(DH, DH)).astype(np.float32) for _ in range(2))
  unpack = lambda p: (p @ w_k, p @ w_v)

  def attend(query, keys, values):
    scores = keys @ query / np.sqrt(DH)
    w = np.exp(scores - scores.max())
    return (w / w.sum()) @ values

  want_y, want_packed = np.zeros(v.shape), np.zeros((B, L, H, DH))
  for b in range(B):
    real = np.flatnonzero(mask[b])
    for h in range(H):
      for l in range(L):  # noqa: E741 - l indexes the L latents (the shape letter L of the docstrings)
        want_packed[b, l, h] = attend(packed_q[b, l, h], k[b, real, h], v[b, real, h])
      for t in range(T):
        pk, pv = unpack(want_packed[b, :, h])
        want_y[b, t, h] = attend(q[b, t, h], pk, pv)
  y, packed = luna.luna_attention(q, k, v, mask, packed_q, unpack)
  np.testing.assert_allclose(np.asarray(packed), want_packed, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(np.asarray(y)[_real(mask, DH)], want_y[_real(mask, DH)],
                             rtol=1e-4, atol=1e-4)


def _naive_local(q, k, v, mask, window):
  out = np.zeros(v.shape)
  for b in range(B):
    for h in range(H):
      for t in range(v.shape[1]):
        near = [s for s in np.flatnonzero(mask[b]) if abs(t - s) <= window // 2]
        if not near:
          continue
        scores = np.array([q[b, t, h] @ k[b, s, h] for s in near]) / np.sqrt(q.shape[-1])
        w = np.exp(scores - scores.max())
        out[b, t, h] = sum(wi * v[b, s, h] for wi, s in zip(w / w.sum(), near))
  return out


@pytest.mark.parametrize("window", [0, 2, 3, 5, 8, 40])
def test_local_window_attention_matches_naive_formula(window):
  """Blocks of window//2 (T=7 is not a multiple of most) reproduce the exact symmetric window."""
  q, k, v, mask = _inputs(7, DH)
  got = np.asarray(latte_macchiato.local_attention(q, k, v, mask, window))
  want = _naive_local(q, k, v, mask, window)
  np.testing.assert_allclose(got[_real(mask, DH)], want[_real(mask, DH)], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("window", [2, 5])
def test_latte_macchiato_matches_naive_formula(window):
  q, k, v, mask = _inputs(8, DH)
  rng = np.random.default_rng(8)
  state_logits = rng.normal(size=(B, T, H, L + 1)).astype(np.float32) * 2
  latent_k = rng.normal(size=(B, T, H, L)).astype(np.float32) * 2
  latent_k[1, 4:] = 50.0
  local = _naive_local(q, k, v, mask, window)
  want = np.zeros(v.shape)
  for b in range(B):
    real = np.flatnonzero(mask[b])
    for h in range(H):
      for t in range(T):
        p = np.exp(state_logits[b, t, h] - state_logits[b, t, h].max())
        p /= p.sum()                                     # over all L+1 states
        want[b, t, h] = p[0] * local[b, t, h]
        for l in range(L):  # noqa: E741 - l indexes the L latents (the shape letter L of the docstrings)
          p_s = np.exp(latent_k[b, real, h, l] - latent_k[b, real, h, l].max())
          want[b, t, h] += p[l + 1] * (p_s / p_s.sum()) @ v[b, real, h]
  got = np.asarray(latte_macchiato.latte_macchiato_attention(q, k, v, state_logits, latent_k,
                                                             mask, window))
  np.testing.assert_allclose(got[_real(mask, DH)], want[_real(mask, DH)], rtol=1e-4, atol=1e-4)


def test_performer_features_fixed_in_eval_and_redrawn_in_training():
  module = performer.PerformerMixer(dim=8, num_heads=2, max_len=T,
                                    num_features=4, redraw=True)
  x = np.random.default_rng(9).normal(size=(1, T, 8)).astype(np.float32)
  mask = np.ones((1, T), bool)
  params = module.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
  run = lambda det, seed: np.asarray(module.apply(
      params, x, mask, deterministic=det, rngs={"dropout": jax.random.PRNGKey(seed)})[0])
  np.testing.assert_array_equal(run(True, 1), run(True, 2))
  assert not np.allclose(run(False, 1), run(False, 2))
  np.testing.assert_array_equal(run(False, 1), run(False, 1))


def _rotation(theta_h, power):
  """Block-diagonal R^power for channel pairs (i, i + Dh/2), by explicit matrix powers."""
  half = theta_h.shape[0]
  r = np.eye(2 * half)
  for i, angle in enumerate(theta_h):
    c, s = np.cos(angle), np.sin(angle)
    r[i, i], r[i, i + half], r[i + half, i], r[i + half, i + half] = c, -s, s, c
  return np.linalg.matrix_power(r if power >= 0 else r.T, abs(power))


def test_vapor_matches_explicit_rotation_matrices():
  """x_t = R^t sum_l p(l|t) sum_s p(s|l) R^{-s} v_s, with R^t built as a matrix power."""
  q, k, v, mask = _inputs(5, L)
  theta = np.random.default_rng(5).uniform(0.1, 1.5, size=(H, DH // 2)).astype(np.float32)
  rotated = np.zeros_like(v, dtype=np.float64)
  for s in range(T):
    for h in range(H):
      rotated[:, s, h] = v[:, s, h] @ _rotation(theta[h], -s).T
  mixed = _naive_latte(q, k, rotated, mask)
  want = np.zeros_like(mixed)
  for t in range(T):
    for h in range(H):
      want[:, t, h] = mixed[:, t, h] @ _rotation(theta[h], t).T
  got = np.asarray(latte.vapor_latte_attention(q, k, v, mask, theta))
  np.testing.assert_allclose(got[_real(mask, DH)], want[_real(mask, DH)], rtol=1e-4, atol=1e-4)
  # Guard: the rotations matter (VAPOR differs from plain Latte).
  plain = np.asarray(latte.latte_attention(q, k, v, mask))
  assert not np.allclose(plain[_real(mask, DH)], got[_real(mask, DH)], atol=1e-2)


def _loop_rg_lru(x, r_logits, i_logits, decay, mask, reverse):
  """Griffin's RG-LRU one step at a time, skipping pads (the state passes through them)."""
  sig = lambda z: 1.0 / (1.0 + np.exp(-z))
  out = np.zeros(x.shape, np.float64)
  steps = range(x.shape[1] - 1, -1, -1) if reverse else range(x.shape[1])
  for b in range(x.shape[0]):
    h = np.zeros(x.shape[-1])
    for t in steps:
      if mask[b, t]:
        a = sig(decay) ** (8.0 * sig(r_logits[b, t]))
        h = a * h + np.sqrt(1.0 - a ** 2) * sig(i_logits[b, t]) * x[b, t]
      out[b, t] = h
  return out


@pytest.mark.parametrize("reverse", [False, True])
def test_rg_lru_scan_matches_python_loop(reverse):
  rng = np.random.default_rng(6)
  x, r_logits, i_logits = (rng.normal(size=(B, T, DH)).astype(np.float32) for _ in range(3))
  decay = rng.normal(size=(DH,)).astype(np.float32) + 2.0
  mask = np.ones((B, T), bool)
  mask[1, 4:] = False
  x[1, 4:] = 1e3  # a leaking pad would swamp the backward state
  got = np.asarray(latte_rglru.rg_lru(x, r_logits, i_logits, decay, mask, reverse))
  want = _loop_rg_lru(x, r_logits, i_logits, decay, mask, reverse)
  np.testing.assert_allclose(got[mask], want[mask], rtol=1e-5, atol=1e-5)
  if reverse:  # the backward scan starts at the last real token: nothing from the pads
    np.testing.assert_allclose(got[1, 3], want[1, 3], rtol=1e-5, atol=1e-5)
    assert np.abs(got[1, 3]).max() < 10.0


@pytest.mark.parametrize("combine", ["sum", "concat"])
def test_bidirectional_latent_features_combine_both_loops(combine):
  """LatentFeatures = combine(forward loop, backward loop): "sum" adds the two scans of one set of
  gates, "concat" projects the scans of two sets."""
  rng = np.random.default_rng(7)
  x = rng.normal(size=(B, T, DH)).astype(np.float32)
  mask = np.ones((B, T), bool)
  mask[1, 5:] = False
  module = latte_rglru.LatentFeatures("rglru", combine=combine)
  params = module.init(jax.random.PRNGKey(0), x, mask)["params"]
  got = np.asarray(module.apply({"params": params}, x, mask))

  def direction(name, reverse):
    p = jax.tree.map(np.asarray, params[name])
    dense = lambda d: x @ d["kernel"] + d["bias"]
    return _loop_rg_lru(x, dense(p["recurrence_gate"]), dense(p["input_gate"]),
                        p["decay_logits"], mask, reverse)

  if combine == "sum":
    assert set(params) == {"rglru"}
    want = direction("rglru", False) + direction("rglru", True)
  else:
    c = jax.tree.map(np.asarray, params["combine"])
    both = np.concatenate([direction("forward", False), direction("backward", True)], -1)
    want = both @ c["kernel"] + c["bias"]
  np.testing.assert_allclose(got[mask], want[mask], rtol=1e-4, atol=1e-5)


def test_latte_conv_features_match_naive_convolution():
  """Latte-Conv: y_t = b + sum_j W_j x_{t+j-1} over all channels (K=3, centred), pads read as 0."""
  rng = np.random.default_rng(12)
  x = rng.normal(size=(B, T, DH)).astype(np.float32)
  mask = np.ones((B, T), bool)
  mask[1, 5:] = False
  x[1, 5:] = 1e3
  module = latte_rglru.LatentFeatures("conv", conv_size=3)
  params = jax.tree.map(np.asarray, module.init(jax.random.PRNGKey(0), x, mask)["params"])
  kernel, bias = params["conv"]["kernel"], params["conv"]["bias"]         # [K,D,D], [D]
  assert kernel.shape == (3, DH, DH)
  real = np.where(mask[..., None], x, 0.0).astype(np.float64)
  want = np.zeros(x.shape)
  for t in range(T):
    want[:, t] = bias
    for j in range(3):
      if 0 <= t + j - 1 < T:
        want[:, t] += real[:, t + j - 1] @ kernel[j]
  got = np.asarray(module.apply({"params": params}, x, mask))
  np.testing.assert_allclose(got[mask], want[mask], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("query_chunk", [0, 3], ids=["one_piece", "chunks"])
def test_softmax_through_jax_nn_dot_product_attention_equals_the_einsum_path(query_chunk):
  """implementation="xla" (jax.nn.dot_product_attention, pads given as a mask) gives the einsum
  path's values and q, k, v gradients: pads at the end, a hole in a row (a mask, not lengths)
  and a row of pads only, which stays finite."""
  q, k, v, mask = _inputs(4, DH)
  mask = np.concatenate([mask, [[True, False, True, True, False, True, False]],
                         np.zeros((1, T), bool)])
  q, k, v = (np.concatenate([a, a[:1] * 0.5, a[1:] + 1.0]) for a in (q, k, v))
  assert not np.array_equal(mask[2], np.arange(T) < mask[2].sum())  # pads not only at the end
  cotangent = np.random.default_rng(4).normal(size=v.shape).astype(np.float32)
  cotangent *= mask[:, :, None, None]

  def run(implementation):
    def loss(q, k, v):
      y = softmax.softmax_attention(q, k, v, mask, query_chunk=query_chunk,
                                    implementation=implementation)
      return jnp.sum(y * cotangent), y
    (_, y), grads = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)
    return np.asarray(y), [np.asarray(g) for g in grads]

  (y_xla, grads_xla), (y_einsum, grads_einsum) = run("xla"), run("einsum")
  assert np.isfinite(y_xla).all() and np.isfinite(y_einsum).all()
  np.testing.assert_allclose(y_xla, y_einsum, rtol=1e-5, atol=1e-5)  # pad rows too
  for got, want in zip(grads_xla, grads_einsum):
    assert np.abs(want).max() > 1e-3
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="a GPU's cases: tests/test_gpu.py")
def test_softmax_implementation_auto_is_einsum_off_a_gpu_and_cudnn_says_why_not():
  assert softmax.implementation_for("auto", jnp.bfloat16, 64) == "einsum"
  assert softmax.SoftmaxMixer.execution_path({"query_chunk": 128}, "bfloat16", 16) == (
      "einsum (query chunks of 128)")
  assert softmax.implementation_for("xla", jnp.float32, 3) == "xla"
  with pytest.raises(ValueError, match="cudnn cannot run: cuDNN runs on NVIDIA GPUs.*"
                     "implementation=auto"):
    softmax.implementation_for("cudnn", jnp.bfloat16, 64)
  with pytest.raises(ValueError, match="one of auto, einsum, xla, cudnn; found 'flash'"):
    softmax.implementation_for("flash", jnp.float32, 64)
