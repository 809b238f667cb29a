"""Preset `published` (S5's and Mega-Chunk's own LRA runs) and the blocks it selects."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.runs.config_loading import resolve_config
from lra.models.encoder import EncoderBlock
from lra.models.mixers import mega, s5

TASKS = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")


@pytest.mark.parametrize("task", TASKS)
def test_each_task_rebuilds_both_published_runs(task):
  s5_config = resolve_config(task, "s5", "published")
  mega_config = resolve_config(task, "mega", "published")
  assert s5_config.model.block == "s5" and s5_config.model.pos_encoding == "none"
  assert s5_config.train.ssm_learning_rate > 0
  assert s5_config.train.learning_rate > s5_config.train.ssm_learning_rate  # lr_factor > 1
  assert mega_config.model.block in ("mega", "mega_prenorm")
  assert mega_config.train.schedule == "linear"
  assert (mega_config.model.embedding == "dense") == (task in ("image", "pathfinder", "pathx"))


def test_listops_values_are_the_run_scripts():
  c = resolve_config("listops", "s5", "published")
  assert (c.model.num_layers, c.model.dim, c.mixers.s5.state_size, c.mixers.s5.blocks) == (
      8, 128, 16, 8)
  assert (c.train.batch_size, c.train.learning_rate, c.train.weight_decay) == (50, 3e-3, 0.04)
  assert c.train.num_steps == 40 * (96_000 // 50) and c.model.s5_gate == "half_glu2"
  m = resolve_config("listops", "mega", "published")
  assert (m.model.num_layers, m.model.dim, m.model.mlp_dim, m.mixers.mega.z_dim) == (
      6, 80, 160, 64)


def test_other_mixers_are_pointed_to_the_paper_preset():
  with pytest.raises(ValueError, match="--preset paper"):
    resolve_config("listops", "latte", "published")


def _block(kind, mixer_cls, **kw):
  return EncoderBlock(functools.partial(mixer_cls, **kw), num_heads=1, mlp_dim=12,
                      dropout_rate=0.0, max_len=10, block=kind)


def _init(block, x, mask):
  """The block's variables, initialised under jit (eager, each op compiles alone: ~8 s a block)."""
  return jax.jit(lambda key: block.init(key, x, mask, None, True))(jax.random.PRNGKey(1))


def test_s5_block_has_no_mlp_and_mega_block_normalises_after_each_update():
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 10, 8)) * 3 + 1
  mask = jnp.ones((2, 10), bool)
  params = _init(_block("s5", s5.S5Mixer, state_size=4, blocks=1), x, mask)["params"]
  assert sorted(params) == ["gate", "mixer", "mixer_norm"]
  block = _block("mega", mega.MegaMixer, chunk_size=4, z_dim=4, ema_dim=2)
  y, _ = block.apply(_init(block, x, mask), x, mask, None, True)
  np.testing.assert_allclose(jnp.mean(y, -1), 0.0, atol=1e-5)  # post-norm: LN is the last step
  np.testing.assert_allclose(jnp.std(y, -1), 1.0, atol=1e-2)


def _layer_norm(x, p):
  centred = x - x.mean(-1, keepdims=True)
  return centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + 1e-6) * p["scale"] + p["bias"]


@pytest.mark.usefixtures("highest_precision")  # formula vs module to f32 accuracy
@pytest.mark.parametrize("kind", ["mega", "mega_prenorm"])
def test_mega_blocks_follow_megas_code(kind):
  """Mega's layer is x + u * (h - x) with u, h from the mixer's own projections (read back from
  its Dense outputs). Post-norm: LN(x + u * (h - x)), then LN(x + FFN(x)). Pre-norm: u and h read
  LN x, but the update moves from the un-normalised x (Mega's pre-norm code), then x + FFN(LN x)."""
  x = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (2, 10, 8))) * 3 + 1
  mask = jnp.arange(10)[None, :] < jnp.array([[10], [7]])
  block = _block(kind, mega.MegaMixer, chunk_size=4, z_dim=4, ema_dim=2)
  params = block.init(jax.random.PRNGKey(1), x, mask, None, True)["params"]
  rng = np.random.default_rng(2)  # norms start at scale 1, bias 0: random ones show each term
  params = jax.tree_util.tree_map_with_path(
      lambda path, a: a + 0.3 * rng.normal(size=a.shape).astype(np.float32)
      if path[-1].key in ("scale", "bias") else a, params)
  (got, _), state = block.apply({"params": params}, x, mask, None, True,
                                capture_intermediates=True)
  mixer = state["intermediates"]["mixer"]
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  u_logit, _, hx = np.split(np.asarray(mixer["mx"]["__call__"][0], np.float64), [8, 8 + 4 + 16],
                            axis=-1)
  u = 1 / (1 + np.exp(-u_logit))
  silu = lambda a: a / (1 + np.exp(-a))  # noqa: E731
  h = silu(hx + np.asarray(mixer["h"]["__call__"][0], np.float64))
  ffn = lambda z: silu(z @ p["ffn_in"]["kernel"] + p["ffn_in"]["bias"]) @ p["ffn_out"]["kernel"] \
      + p["ffn_out"]["bias"]  # noqa: E731
  if kind == "mega":
    x1 = _layer_norm(x + u * (h - x), p["mixer_norm"])
    want = _layer_norm(x1 + ffn(x1), p["mlp_norm"])
  else:
    x1 = x + u * (h - x)
    want = x1 + ffn(_layer_norm(x1, p["mlp_norm"]))
    # The update that moved from LN x instead is far from this one: the test can tell them apart.
    wrong = x + u * (h - _layer_norm(x, p["mixer_norm"]))
    assert np.abs(wrong - x1).max() > 0.1
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("preset", ["paper", "lra"])
def test_mixers_with_their_own_positions_get_no_absolute_ones(task, preset):
  """S5 and Mega carry positions in their recurrences, so the encoder adds none in any preset;
  every other mixer keeps the task's absolute positions (learned in LRA's image/Path-X runs)."""
  expected = "learned" if preset == "lra" and task in ("image", "pathx") else "sinusoidal"
  assert resolve_config(task, "latte", preset).model.pos_encoding == expected
  for mixer in ("s5", "mega"):
    assert resolve_config(task, mixer, preset).model.pos_encoding == "none"


@pytest.mark.parametrize("mixer, batch, steps, warmup", [("s5", 50, 3200, 80),
                                                         ("mega", 64, 2500, 83)])
def test_laptop_published_fits_the_published_run_into_the_laptop_budget(mixer, batch, steps,
                                                                       warmup):
  """Own architecture and optimizer, the laptop's data, 160,000 examples at the published batch:
  the warm-up keeps its fraction of the run (S5: 1 of 40 epochs; Mega: 3,000 of 90,000 updates)."""
  published = resolve_config("listops", mixer, "published")
  c = resolve_config("listops", mixer, "laptop_published")
  laptop = resolve_config("listops", "latte", "laptop")
  # The laptop's data, batched as the block's norm allows: BatchNorm (S5's) keeps every batch
  # whole at the task's length (lra.training.train.check_batchnorm), the rest the laptop's buckets.
  batching = ("padding", "bucketing")
  assert ({k: v for k, v in c.data.to_dict().items() if k not in batching}
          == {k: v for k, v in laptop.data.to_dict().items() if k not in batching})
  assert ((c.data.padding, c.data.bucketing) == ("fixed", False) if c.model.norm == "batch"
          else (c.data.padding, c.data.bucketing) == (laptop.data.padding, laptop.data.bucketing))
  assert c.train.batch_size == published.train.batch_size == batch
  assert c.train.num_steps * batch <= laptop.train.num_steps * laptop.train.batch_size
  assert (c.train.num_steps, c.train.warmup_steps) == (steps, warmup)
  assert c.eval.every_steps == steps // 10
  for key in ("block", "num_layers", "dim", "norm", "pos_encoding"):
    assert c.model[key] == published.model[key], key
  for key in ("learning_rate", "ssm_learning_rate", "weight_decay", "schedule"):
    assert c.train[key] == published.train[key], key
  with pytest.raises(ValueError, match="published"):
    resolve_config("listops", "latte", "laptop_published")


def test_laptop_gives_s5_its_own_listops_state():
  """S5's ListOps script runs P=16 in 8 blocks; the laptop preset follows it, not run_train's
  256."""
  laptop = resolve_config("listops", "s5", "laptop").mixers.s5
  published = resolve_config("listops", "s5", "published").mixers.s5
  assert (laptop.state_size, laptop.blocks) == (published.state_size, published.blocks) == (16, 8)


@pytest.mark.parametrize("task,preset", [("pathfinder", "squares_published"),
                                         ("pathfinder", "published"), ("listops", "published")])
def test_published_s5_trains_at_s5s_rates_with_s5s_dropout(task, preset):
  """S5's trainer runs its first step at the peak rate and draws one dropout mask per example and
  feature for the whole sequence, none after its encoder (issue 78: trained as its own code)."""
  from lra.models.build import build_model
  from lra.training import optim
  c = resolve_config(task, "s5", preset)
  assert c.train.schedule == "s5_cosine" and c.model.s5_dropout == "s5"
  assert float(optim.learning_rate_schedule(c.train)(0)) == pytest.approx(c.train.learning_rate)
  c.model.dropout, c.model.num_layers, c.model.dim = 0.5, 1, 8
  spec = type("Spec", (), dict(vocab_size=256, seq_len=64, num_classes=2, dual=False,
                               pad_id=None))()
  model = build_model(c, spec)
  batch = {"inputs": jnp.full((3, 64), 200, jnp.int32), "mask": jnp.ones((3, 64), bool)}
  variables = model.init(jax.random.PRNGKey(0), batch, deterministic=True)
  _, seen = model.apply(variables, batch, deterministic=False,
                        mutable=["intermediates", "batch_stats"],
                        rngs={"dropout": jax.random.PRNGKey(1)},
                        capture_intermediates=lambda m, _: type(m).__name__ == "Dropout")
  drops = jax.tree.leaves(seen["intermediates"])
  assert len(drops) == 2  # the block's two; no dropout after the embedding
  for out in drops:
    dropped = np.asarray(out == 0)             # [B,T,D]
    assert dropped.any() and not dropped.all()
    assert (dropped == dropped[:, :1]).all()  # the same features dropped at every position
