"""Dropout's keys: the paired threefry bits' stated counter layout, uniform draws, and masks that
are a function of (seed, step) for every generator `train.dropout_bits` offers."""
import jax
import jax.extend.random as jex_random
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training.train_state import TrainState

from lra.runs.config_loading import load_data, resolve_config
from lra.machine import distributed
from lra.training import dropout_rng, train
from lra.models.build import build_model
from lra.tasks.contract.batches import train_batches


def test_each_threefry_block_gives_two_neighbouring_draws_of_the_last_axis():
  key = jax.random.fold_in(dropout_rng.key(3), 7)
  bits = np.asarray(jax.random.bits(key, (4, 6, 8), jnp.uint32))
  # Reference layout from NumPy: block i hashes the counter pair (0, i), i row-major over
  # [4, 6, 4]; its first word is element [..., j], its second [..., j + 4].
  raw = jax.random.key_data(key)
  counter = np.arange(4 * 6 * 4, dtype=np.uint32).reshape(4, 6, 4)
  first, second = jex_random.threefry2x32_p.bind(raw[0], raw[1], np.zeros_like(counter), counter)
  np.testing.assert_array_equal(bits, np.concatenate([first, second], axis=-1))
  assert len(np.unique(bits)) == bits.size
  odd = jax.random.bits(key, (3, 5), jnp.uint32)  # odd last axis: JAX's own threefry bits
  assert odd.shape == (3, 5) and len(np.unique(np.asarray(odd))) == 15


def test_paired_draws_are_uniform_and_uncorrelated():
  key = dropout_rng.key(0)
  keep = np.asarray(jax.random.bernoulli(key, 0.9, (64, 125, 128)))  # 1M draws
  assert abs(keep.mean() - 0.9) < 0.002
  u = np.asarray(jax.random.uniform(jax.random.fold_in(key, 1), (64, 125, 128)))
  assert abs(u.mean() - 0.5) < 0.002 and abs(u.var() - 1 / 12) < 0.002
  # The two words of a block land 64 apart on the last axis: they must not move together.
  assert abs(np.corrcoef(u[..., :64].ravel(), u[..., 64:].ravel())[0, 1]) < 0.01


@pytest.mark.parametrize("bits", dropout_rng.BITS)
def test_dropout_masks_are_a_function_of_the_step(tmp_path, bits):
  config = resolve_config("listops", "latte", "smoke", ["model.dropout=0.5"])
  data = load_data(config, tmp_path, log=lambda _: None)
  model = build_model(config, data.spec)
  params = model.init(jax.random.PRNGKey(0), train.example_batch(data.spec, 1),
                      deterministic=True)["params"]
  step, _ = train.make_steps(model, distributed.data_mesh(), dropout_seed=1, dropout_bits=bits)
  batch = next(train_batches(data.split("train"), data.spec, 16, seed=0))
  losses = []
  for at in (4, 4, 5):
    # The step donates its state: each call gets its own copy of the parameters.
    state = TrainState.create(apply_fn=model.apply, params=jax.tree.map(jnp.copy, params),
                              tx=optax.sgd(0.0))
    state = state.replace(step=at)
    losses.append(float(jax.device_get(step(state, [batch])[1]["loss_sum"])))  # one micro-batch
  assert losses[0] == losses[1] and losses[0] != losses[2]


def test_threefry_is_jaxs_default_key_and_unknown_names_fail():
  np.testing.assert_array_equal(jax.random.key_data(dropout_rng.key(5, "threefry")),
                                jax.random.key_data(jax.random.PRNGKey(5)))
  # The paired key holds the same key data: only the way bits are drawn from it differs.
  np.testing.assert_array_equal(jax.random.key_data(dropout_rng.key(5, "paired")),
                                jax.random.key_data(jax.random.PRNGKey(5)))
  with pytest.raises(ValueError, match="one of threefry, paired, rbg, unsafe_rbg, got 'philox'"):
    dropout_rng.key(5, "philox")


@pytest.mark.parametrize("bits", ["rbg", "unsafe_rbg"])
def test_rbg_keys_are_seeded_uniform_and_not_threefrys(bits):
  first, again = dropout_rng.key(7, bits), dropout_rng.key(7, bits)
  draw = lambda k, step: np.asarray(  # noqa: E731
      jax.random.bernoulli(jax.random.fold_in(k, step), 0.9, (64, 125, 128)))
  np.testing.assert_array_equal(draw(first, 3), draw(again, 3))  # same seed, same mask
  assert (draw(first, 3) != draw(first, 4)).any()  # another step, another mask
  assert (draw(first, 3) != draw(dropout_rng.key(8, bits), 3)).any()
  assert abs(draw(first, 3).mean() - 0.9) < 0.002  # 1M draws
  # Another generator than threefry's: the same seed gives other masks.
  assert (draw(first, 3) != draw(dropout_rng.key(7, "threefry"), 3)).any()
  assert jax.random.key_impl(first) == jax.random.key_impl(jax.random.key(0, impl=bits))
