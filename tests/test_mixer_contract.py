"""The contract every registered mixer meets (DESIGN.md), parametrised over the registry."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs.common import mixer_configs
from models.mixers import MIXERS

D, HEADS, T = 16, 2, 24


def _build(name):
  cfg = mixer_configs()
  assert name in cfg, f"mixer '{name}' has no block in configs.common.mixer_configs()"
  small = {k: (min(v, 8) if isinstance(v, int) and not isinstance(v, bool) and k not in
               ("window", "seed") else v) for k, v in cfg[name].to_dict().items()}
  return MIXERS[name](dim=D, num_heads=HEADS, dropout_rate=0.0, max_len=T, **small)


def _apply(module, params, x, mask):
  y, _ = module.apply(params, x, mask, deterministic=True)
  return np.asarray(y)


@pytest.fixture(params=sorted(MIXERS))
def mixer(request):
  module = _build(request.param)
  x = jax.random.normal(jax.random.PRNGKey(0), (2, T, D))
  mask = jnp.arange(T)[None, :] < jnp.array([[T], [T - 7]])
  params = module.init(jax.random.PRNGKey(1), x, mask, deterministic=True)
  return module, params, x, mask


def test_every_mixer_has_a_config_block_and_description():
  cfg = mixer_configs()
  assert sorted(cfg.keys()) == sorted(MIXERS)
  for cls in MIXERS.values():
    assert (cls.__doc__ or "").strip(), f"{cls.__name__} needs a one-line docstring for `lra list`"


def test_shape_and_finite(mixer):
  module, params, x, mask = mixer
  y = _apply(module, params, x, mask)
  assert y.shape == x.shape
  assert np.isfinite(y).all()


def test_padding_invariance(mixer):
  module, params, x, mask = mixer
  y = _apply(module, params, x, mask)
  # New pad contents, and the same real tokens with extra padding appended.
  x_noisy = jnp.where(mask[..., None], x, 100.0 * jax.random.normal(jax.random.PRNGKey(2), x.shape))
  y_noisy = _apply(module, params, x_noisy, mask)
  np.testing.assert_allclose(y_noisy[mask], y[mask], rtol=1e-4, atol=1e-4)
  x_long = jnp.concatenate([x, jnp.zeros((2, 8, D))], axis=1)
  mask_long = jnp.concatenate([mask, jnp.zeros((2, 8), bool)], axis=1)
  y_long = _apply(module, params, x_long, mask_long)
  np.testing.assert_allclose(y_long[:, :T][mask], y[mask], rtol=1e-4, atol=1e-4)


def test_bidirectional(mixer):
  module, params, x, mask = mixer
  y = _apply(module, params, x, mask)
  last = T - 8  # last real token of the padded sequence
  y2 = _apply(module, params, x.at[1, last].add(3.0), mask)
  assert np.abs(y2[1, 0] - y[1, 0]).max() > 1e-6, "the last real token must reach the first output"


def test_jit_matches_eager_and_is_deterministic(mixer):
  module, params, x, mask = mixer
  eager = _apply(module, params, x, mask)
  jitted = jax.jit(lambda p, a, m: module.apply(p, a, m, deterministic=True)[0])
  np.testing.assert_allclose(np.asarray(jitted(params, x, mask)), eager, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(np.asarray(jitted(params, x, mask)),
                                np.asarray(jitted(params, x, mask)))
