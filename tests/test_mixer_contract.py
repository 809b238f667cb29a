"""The contract every registered mixer meets (DESIGN.md), parametrised over the registry."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.configs.common import mixer_configs
from lra.models.mixers import MIXERS

D, HEADS, T = 16, 2, 24
EXTRA_PADS = 8  # appended in the padding test; max_len covers it, as a task's seq_len would


# Options that change a mixer's maths get the contract too: test id -> (mixer, overrides).
VARIANTS = {"latte+vapor": ("latte", {"vapor": True}),
            "latte_rglru+conv": ("latte_rglru", {"latent_input": "conv"}),
            "latte_rglru+concat": ("latte_rglru", {"combine": "concat"}),
            "latte_rglru_swa+rope": ("latte_rglru_swa", {"rope": True, "combine": "concat"})}


def _build(name):
  name, overrides = VARIANTS.get(name, (name, {}))
  cfg = mixer_configs()
  assert name in cfg, f"mixer '{name}' has no block in configs.common.mixer_configs()"
  small = {k: (min(v, 8) if isinstance(v, int) and not isinstance(v, bool) and k not in
               ("window", "seed") else v) for k, v in cfg[name].to_dict().items()}
  return MIXERS[name](dim=D, num_heads=HEADS, max_len=T + EXTRA_PADS,
                      **{**small, **overrides})


_JITTED = {}


def _apply(module, params, x, mask):
  """The mixer's output in eval mode, jitted once per module (eager Flax is slow on CPU)."""
  if id(module) not in _JITTED:
    _JITTED[id(module)] = jax.jit(lambda p, a, m: module.apply(p, a, m, deterministic=True)[0])
  return np.asarray(_JITTED[id(module)](params, x, mask))


@pytest.fixture(scope="module", params=sorted(MIXERS) + sorted(VARIANTS))
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
  x_long = jnp.concatenate([x, jnp.zeros((2, EXTRA_PADS, D))], axis=1)
  mask_long = jnp.concatenate([mask, jnp.zeros((2, EXTRA_PADS), bool)], axis=1)
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
  eager = np.asarray(module.apply(params, x, mask, deterministic=True)[0])
  jitted = jax.jit(lambda p, a, m: module.apply(p, a, m, deterministic=True)[0])
  np.testing.assert_allclose(np.asarray(jitted(params, x, mask)), eager, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(np.asarray(jitted(params, x, mask)),
                                np.asarray(jitted(params, x, mask)))


def _two_layers(module, params, x, mask):
  """The mixer applied twice, the second call receiving the first one's carry (as blocks do)."""
  first = module.apply(params, x, mask, deterministic=True)
  return first, module.apply(params, x, mask, deterministic=True, carry=first[1])


def test_carry_threads_through_layers_without_seeing_pads(mixer):
  """A mixer's returned carry feeds the next layer; it, too, must ignore pads."""
  module, params, x, mask = mixer
  two_layers = jax.jit(lambda p, a, m: _two_layers(module, p, a, m))
  (_, carry), (y2, _) = two_layers(params, x, mask)
  x_noisy = jnp.where(mask[..., None], x, 100.0 * jax.random.normal(jax.random.PRNGKey(3), x.shape))
  (_, carry_noisy), (y2_noisy, _) = two_layers(params, x_noisy, mask)
  for a, b in zip(jax.tree.leaves(carry), jax.tree.leaves(carry_noisy)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)
  assert y2.shape == x.shape and np.isfinite(np.asarray(y2)).all()
  np.testing.assert_allclose(np.asarray(y2_noisy)[mask], np.asarray(y2)[mask], rtol=1e-4,
                             atol=1e-4)


MEMORY_T = 8192


def _train_step_bytes(name):
  """Peak bytes XLA plans for forward + backward of one mixer at T=8192 (compiled, not run)."""
  cfg = mixer_configs()[name].to_dict()
  module = MIXERS[name](dim=16, num_heads=2, max_len=MEMORY_T, **cfg)
  x = jax.ShapeDtypeStruct((1, MEMORY_T, 16), jnp.float32)
  mask = jax.ShapeDtypeStruct((1, MEMORY_T), jnp.bool_)
  params = jax.eval_shape(lambda a, m: module.init(jax.random.PRNGKey(0), a, m,
                                                   deterministic=True), x, mask)
  loss = lambda p, a, m: jnp.sum(module.apply(p, a, m, deterministic=True)[0] ** 2)
  stats = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(params, x, mask).compile()
  stats = stats.memory_analysis()
  return stats.temp_size_in_bytes + stats.argument_size_in_bytes + stats.output_size_in_bytes


@pytest.fixture(scope="module")
def softmax_bytes():
  return _train_step_bytes("softmax")


@pytest.mark.parametrize("name", sorted(set(MIXERS) - {"softmax"}))
def test_memory_at_8k_is_far_below_softmax(name, softmax_bytes):
  """Every mixer but the softmax baseline is sub-quadratic: at T=8192 with its default settings,
  forward+backward plans under 1/8 of softmax's memory (softmax's T x T scores alone are 512 MiB
  per head here)."""
  assert _train_step_bytes(name) < softmax_bytes / 8
