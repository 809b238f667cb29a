"""S5: its initialisation against HiPPO-N computed directly, its scans against the recurrence."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models.mixers import s5, s5_init

B, T, D, P = 2, 9, 3, 4


def test_hippo_legs_entries_follow_their_definition():
  a = s5_init.hippo_legs(4)
  for n in range(4):
    for k in range(4):
      expected = (-np.sqrt((2 * n + 1) * (2 * k + 1)) if n > k else -(n + 1.0) if n == k else 0.0)
      assert a[n, k] == pytest.approx(expected)


def test_hippo_n_eigenvalues_equal_those_computed_directly():
  n = 8
  s = s5_init.hippo_n(n)
  lam, v = s5_init.diagonalise_hippo_n(n)
  direct = np.linalg.eigvals(s)  # a general solver, on the matrix itself
  np.testing.assert_allclose(np.sort(lam.imag), np.sort(direct.imag), atol=1e-9)
  np.testing.assert_allclose(direct.real, -0.5, atol=1e-9)
  np.testing.assert_allclose(lam.real, -0.5, atol=1e-12)
  np.testing.assert_allclose(v.conj().T @ v, np.eye(n), atol=1e-12)  # unitary
  np.testing.assert_allclose(v @ np.diag(lam) @ v.conj().T, s, atol=1e-9)


def test_blocks_keep_one_eigenvalue_of_each_conjugate_pair():
  lam, v, v_inv = s5_init.block_diagonal_init(state_size=16, blocks=2)
  full, _ = s5_init.diagonalise_hippo_n(8)
  assert lam.shape == (8,) and v.shape == (16, 8) and v_inv.shape == (8, 16)
  kept = lam[:4]
  np.testing.assert_allclose(lam[4:], kept)  # the same block twice
  np.testing.assert_allclose(np.sort(np.concatenate([kept, kept.conj()]).imag),
                             np.sort(full.imag), atol=1e-9)
  assert np.all(kept.imag < 0)
  np.testing.assert_allclose(v[8:, :4], 0.0)  # block diagonal
  np.testing.assert_allclose(v_inv @ v, np.eye(8), atol=1e-12)


def test_block_sizes_are_checked():
  with pytest.raises(ValueError, match="even multiple"):
    s5_init.block_diagonal_init(state_size=12, blocks=4)


def _parameters(seed):
  rng = np.random.default_rng(seed)
  radius, angle = rng.uniform(0.5, 0.95, P), rng.uniform(-np.pi, np.pi, P)
  lam = radius * np.exp(1j * angle)
  b, c1, c2 = (rng.normal(size=shape) + 1j * rng.normal(size=shape)
               for shape in ((P, D), (D, P), (D, P)))
  u = rng.normal(size=(B, T, D))
  mask = np.ones((B, T), bool)
  mask[1, 6:] = False
  u[1, 6:] = 1e3  # pads must not enter either scan
  return lam, b, c1, c2, u, mask


def _recurrence(lam, b, c1, c2, u, mask):
  """Step by step: x_t = lam x_{t-1} + b u_t, forwards and backwards, pads as zero input."""
  bu = jnp.einsum("btd,pd->tbp", jnp.where(mask[..., None], u, 0.0), b)  # time first

  def step(state, bu_t):
    state = lam[None] * state + bu_t
    return state, state
  zeros = jnp.zeros((u.shape[0], lam.shape[0]), jnp.complex64)
  _, fwd = jax.lax.scan(step, zeros, bu)
  _, bwd = jax.lax.scan(step, zeros, bu, reverse=True)
  y = jnp.einsum("tbp,dp->btd", fwd, c1) + jnp.einsum("tbp,dp->btd", bwd, c2)
  return 2 * y.real


def _as_reals(lam, b, c1, c2):
  return [jnp.asarray(a, jnp.float32) for z in (lam, b, c1, c2) for a in (z.real, z.imag)]


def _call(fn, reals, u, mask):
  lam, b, c1, c2 = (re + 1j * im for re, im in zip(reals[::2], reals[1::2]))
  return fn(lam, b, c1, c2, u, mask)


def test_scans_equal_the_step_by_step_recurrence_values_and_gradients():
  lam, b, c1, c2, u, mask = _parameters(0)
  reals, u = _as_reals(lam, b, c1, c2), jnp.asarray(u, jnp.float32)
  scan = lambda lam, b, c1, c2, u, mask: s5.s5_ssm(u, mask, lam, b, c1, c2)  # noqa: E731
  weights = jnp.asarray(np.random.default_rng(1).normal(size=(B, T, D)), jnp.float32) * mask[
      ..., None]
  with jax.default_matmul_precision("highest"):
    np.testing.assert_allclose(_call(scan, reals, u, mask) * mask[..., None],
                               _call(_recurrence, reals, u, mask) * mask[..., None],
                               rtol=1e-4, atol=1e-4)
    grads = [jax.jit(jax.grad(lambda r, u: jnp.sum(_call(fn, r, u, mask) * weights),
                              argnums=(0, 1)))(reals, u) for fn in (scan, _recurrence)]
  for got, want in zip(jax.tree.leaves(grads[0]), jax.tree.leaves(grads[1])):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
  assert np.all(np.asarray(grads[0][1])[1, 6:] == 0.0)  # no gradient reaches a pad


def test_padded_sequence_gives_the_unpadded_result():
  mixer = s5.S5Mixer(dim=8, num_heads=1, max_len=16, state_size=8, blocks=2)
  x = jax.random.normal(jax.random.PRNGKey(0), (1, 16, 8))
  mask = jnp.arange(16)[None] < 11
  padded = jnp.where(mask[..., None], x, 50.0)
  params = jax.jit(lambda key: mixer.init(key, x, mask, deterministic=True))(
      jax.random.PRNGKey(1))
  apply = jax.jit(lambda x, mask: mixer.apply(params, x, mask, deterministic=True)[0])
  with jax.default_matmul_precision("highest"):
    y_pad, y_cut = apply(padded, mask), apply(x[:, :11], mask[:, :11])
  np.testing.assert_allclose(y_pad[:, :11], y_cut, rtol=1e-6, atol=1e-6)


def test_zero_order_hold_integrates_the_continuous_input():
  lam = jnp.asarray([-0.5 + 2j, -0.1 - 1j])
  b = jnp.asarray([[1.0 + 0.5j], [0.3 - 1j]])
  step = jnp.asarray([0.1, 0.7])
  lambda_bar, b_bar = s5.discretise_zoh(lam, b, step)
  np.testing.assert_allclose(lambda_bar, np.exp(np.asarray(lam) * np.asarray(step)), rtol=1e-6)
  # B_bar = integral_0^dt exp(lambda s) ds B, by the midpoint rule.
  s = (np.arange(20000) + 0.5) / 20000 * np.asarray(step)[:, None]
  integral = np.mean(np.exp(np.asarray(lam)[:, None] * s), axis=1) * np.asarray(step)
  np.testing.assert_allclose(b_bar[:, 0], integral * np.asarray(b)[:, 0], rtol=1e-5)


def test_ssm_parameters_get_their_own_rate_and_no_weight_decay():
  from lra.training import optim
  from lra.configs import listops
  config = listops.get_config("smoke,mixer=s5")
  with config.unlocked():
    config.train.learning_rate, config.train.ssm_learning_rate = 0.1, 0.01
    config.train.weight_decay, config.train.grad_clip_norm = 0.5, 0.0
  assert optim.ssm_params(config) == ("Lambda_re", "Lambda_im", "log_step", "B")
  params = {"block_0": {"mixer": {"B": jnp.ones(3), "C1": jnp.ones(3)}},
            "head_out": {"B": jnp.ones(3)}}  # a "B" outside a mixer is not an SSM parameter
  tx = optim.make_optimizer(config.train, optim.ssm_params(config))
  grads = jax.tree.map(jnp.ones_like, params)
  updates, _ = tx.update(grads, tx.init(params), params)
  # Adam's first step moves each weight by its rate; AdamW adds rate * decay * weight.
  np.testing.assert_allclose(updates["block_0"]["mixer"]["B"], -0.01, rtol=1e-4)
  np.testing.assert_allclose(updates["block_0"]["mixer"]["C1"], -0.1 * (1 + 0.5), rtol=1e-4)
  np.testing.assert_allclose(updates["head_out"]["B"], -0.1 * (1 + 0.5), rtol=1e-4)


@pytest.mark.parametrize("activation", s5.ACTIVATIONS)
def test_output_layer_is_s5s_own_after_the_scans(activation):
  """S5's SequenceLayer (s5/layers.py) after `self.seq(x)`: GELU, then "half_glu1" gates the GELU
  output by sigmoid(W GELU(y)), "half_glu2" gates y itself; "none" is the bare SSM. The SSM is
  recomputed here step by step from the layer's own parameters (discretised, both directions,
  plus D x), so every case, "none" included, is checked against a formula (float32: 1e-5)."""
  mixer = s5.S5Mixer(dim=6, num_heads=1, max_len=10, state_size=8, blocks=2,
                     activation=activation)
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 10, 6))
  mask = jnp.ones((2, 10), bool)
  params = mixer.init(jax.random.PRNGKey(1), x, mask, deterministic=True)["params"]
  pair = lambda name: params[name][..., 0] + 1j * params[name][..., 1]  # noqa: E731
  with jax.default_matmul_precision("highest"):
    y = np.asarray(mixer.apply({"params": params}, x, mask, deterministic=True)[0])
    lambda_bar, b_bar = s5.discretise_zoh(params["Lambda_re"] + 1j * params["Lambda_im"],
                                          pair("B"), jnp.exp(params["log_step"]))
    ssm = np.asarray(_recurrence(lambda_bar, b_bar, pair("C1"), pair("C2"), x, mask)
                     + params["D"][None, None] * x)
  assert ("gate" in params) == activation.startswith("half_glu")
  gelu = np.asarray(jax.nn.gelu(ssm))
  if activation.startswith("half_glu"):
    w, b = np.asarray(params["gate"]["kernel"]), np.asarray(params["gate"]["bias"])
    gate = 1.0 / (1.0 + np.exp(-(gelu @ w + b)))
  want = {"none": ssm, "gelu": gelu, "half_glu1": gelu * gate if activation == "half_glu1" else
          None, "half_glu2": ssm * gate if activation == "half_glu2" else None}[activation]
  np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_common_block_s5_is_s5s_layer_and_the_published_block_gates_once():
  from lra.runs.config_loading import resolve_config
  from lra.models.build import build_model
  from lra.tasks import TaskSpec
  common = resolve_config("listops", "s5", "smoke")
  assert common.mixers.s5.activation == "half_glu1"  # S5's run_train.py default
  published = resolve_config("listops", "s5", "published")
  assert published.model.block == "s5" and published.mixers.s5.activation == "none"
  twice = resolve_config("listops", "s5", "smoke", ["model.block=s5"])
  spec = TaskSpec(vocab_size=20, seq_len=16, num_classes=10, dual=False)
  with pytest.raises(ValueError, match="mixers.s5.activation=none"):
    build_model(twice, spec)
