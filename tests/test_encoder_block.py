"""The encoder's blocks (prenorm, the Latte paper's "++"), its options, pooling and heads against
naive formulas."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models.encoder import Classifier, Encoder, EncoderBlock, MlpBlock, image_patches
from lra.models.mixers.latte import LatteMixer

D, MLP, T = 8, 16, 12
MIXER = functools.partial(LatteMixer, num_latents=4)
LENGTHS = (T, T - 5)
# The formulas are compared to f32 accuracy.
pytestmark = pytest.mark.usefixtures("highest_precision")


def _encoder(**options):
  return Encoder(vocab_size=11, max_len=T, dim=D, num_layers=1, num_heads=2, mlp_dim=MLP,
                 dropout_rate=0.0, mixer_factory=MIXER, **options)


def _inputs():
  tokens = jax.random.randint(jax.random.PRNGKey(5), (2, T), 1, 11)
  mask = jnp.arange(T)[None, :] < jnp.array(LENGTHS)[:, None]
  return tokens, mask


def _count(params):
  return sum(a.size for a in jax.tree.leaves(params))


def _init(**options):
  tokens, mask = _inputs()
  return _encoder(**options).init(jax.random.PRNGKey(0), tokens, mask, deterministic=True)


def test_plusplus_weights_follow_the_paper_and_mixer_gate_adds_ours():
  """++ = prenorm with RMSNorms (D weights, not 2D: three norms with the final one) and a GLU
  (one more D x mlp_dim Dense); mixer_gate adds a D x D gate and a D x D projection."""
  pre, plus = _count(_init()), _count(_init(block="plusplus"))
  assert plus - pre == (D * MLP + MLP) - 3 * D
  assert _count(_init(block="plusplus", mixer_gate=True)) - plus == 2 * (D * D + D)
  assert _count(_init(final_norm=False)) == pre - 2 * D


def _rms_norm(x, scale):
  return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + 1e-6) * scale


def _layer_norm(x, p):
  centred = x - x.mean(-1, keepdims=True)
  return centred / np.sqrt(np.mean(centred ** 2, -1, keepdims=True) + 1e-6) * p["scale"] + p["bias"]


def _gelu(x):  # flax's default, the tanh approximation
  return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


@pytest.mark.parametrize("block, glu, mixer_gate", [
    ("plusplus", "sigmoid", False), ("plusplus", "gelu", True), ("prenorm", "sigmoid", False)])
def test_block_matches_its_formula(block, glu, mixer_gate):
  """++: h = RMSNorm x; x += Mixer(h) [or Dense(GELU(Dense h) * Mixer(h))]; x += GLU(RMSNorm x)
  with GLU(z) = Dense(act(Dense z) * Dense z). prenorm: LayerNorms and Dense(GELU(Dense z))."""
  module = EncoderBlock(MIXER, num_heads=2, mlp_dim=MLP, dropout_rate=0.0, max_len=T,
                        block=block, glu=glu, mixer_gate=mixer_gate)
  x = np.asarray(jax.random.normal(jax.random.PRNGKey(1), (2, T, D)))
  _, mask = _inputs()
  params = module.init(jax.random.PRNGKey(2), x, mask, None, True)["params"]
  # Norm scales start at 1 and biases at 0; random ones make a missing term visible.
  rng = np.random.default_rng(6)
  params = jax.tree_util.tree_map_with_path(
      lambda path, a: a + 0.3 * rng.normal(size=a.shape).astype(np.float32)
      if path[-1].key in ("scale", "bias") else a, params)
  got = np.asarray(module.apply({"params": params}, x, mask, None, True)[0])

  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
  dense = lambda z, d: z @ d["kernel"] + d["bias"]
  norm = ((lambda z, n: _rms_norm(z, n["scale"])) if block == "plusplus" else _layer_norm)
  h = norm(x, p["mixer_norm"])
  y = np.asarray(MIXER(dim=D, num_heads=2, max_len=T).apply(
      {"params": params["mixer"]}, jnp.asarray(h, jnp.float32), mask, deterministic=True)[0])
  if mixer_gate:
    y = dense(_gelu(dense(h, p["mixer_gate"])) * y, p["mixer_out"])
  x1 = x + y
  z = norm(x1, p["mlp_norm"])
  if block == "plusplus":
    act = (lambda a: 1 / (1 + np.exp(-a))) if glu == "sigmoid" else _gelu
    m = p["mlp"]
    y = dense(act(dense(z, m["gate"])) * dense(z, m["up"]), m["down"])
  else:
    y = dense(_gelu(dense(z, p["mlp"]["Dense_0"])), p["mlp"]["Dense_1"])
  np.testing.assert_allclose(got, x1 + y, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("hidden_dropout", [False, True])
def test_mlp_hidden_dropout_is_the_only_dropout_inside_the_mlp(hidden_dropout):
  """Without hidden dropout (the authors' code) a training-mode MLP equals its eval output (the
  block drops the MLP's output itself); with it, the two differ."""
  module = MlpBlock(MLP, 0.5, hidden_dropout)
  x = jax.random.normal(jax.random.PRNGKey(3), (2, T, D))
  params = module.init(jax.random.PRNGKey(0), x, deterministic=True)
  train = module.apply(params, x, deterministic=False, rngs={"dropout": jax.random.PRNGKey(4)})
  same = np.allclose(np.asarray(train), np.asarray(module.apply(params, x, deterministic=True)))
  assert same != hidden_dropout


def _token_outputs(encoder, params, tokens, mask):
  """Pooled features [B,D] and the per-token features [B,T,D] they were pooled from."""
  pooled, state = encoder.apply(params, tokens, mask, deterministic=True,
                                capture_intermediates=True)
  return np.asarray(pooled), np.asarray(state["intermediates"]["final_norm"]["__call__"][0])


def test_last_token_pooling_and_final_norm():
  """pooling="last" returns the last real token's features; without the final norm they are the
  last block's output, which the final LayerNorm (scale 1, bias 0 at init) maps to the former."""
  tokens, mask = _inputs()
  encoder = _encoder(pooling="last")
  params = encoder.init(jax.random.PRNGKey(0), tokens, mask, deterministic=True)
  pooled, per_token = _token_outputs(encoder, params, tokens, mask)
  np.testing.assert_allclose(pooled, per_token[[0, 1], [n - 1 for n in LENGTHS]], rtol=1e-6)
  bare = {"params": {k: v for k, v in params["params"].items() if k != "final_norm"}}
  unnormed = np.asarray(_encoder(pooling="last", final_norm=False).apply(
      bare, tokens, mask, deterministic=True))
  identity = {"scale": np.ones(D), "bias": np.zeros(D)}
  np.testing.assert_allclose(_layer_norm(unnormed.astype(np.float64), identity), pooled,
                             rtol=1e-4, atol=1e-4)
  assert not np.allclose(unnormed, pooled, atol=1e-2)


@pytest.mark.parametrize("head", ["mlp", "linear"])
def test_classifier_heads(head):
  """mlp: Dense(C)(GELU(Dense(D) f)); linear: Dense(C) f, with f the encoder's pooled features."""
  tokens, mask = _inputs()
  model = Classifier(encoder=_encoder(), num_classes=3, head=head)
  batch = {"inputs": tokens, "mask": mask}
  params = model.init(jax.random.PRNGKey(0), batch, deterministic=True)
  logits, state = model.apply(params, batch, deterministic=True, capture_intermediates=True)
  features = np.asarray(state["intermediates"]["encoder"]["__call__"][0], np.float64)
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params["params"])
  dense = lambda z, d: z @ d["kernel"] + d["bias"]
  assert ("head_hidden" in p) == (head == "mlp")
  if head == "mlp":
    features = _gelu(dense(features, p["head_hidden"]))
  np.testing.assert_allclose(np.asarray(logits), dense(features, p["head_out"]), rtol=1e-4,
                             atol=1e-5)


def test_plusplus_ignores_pads_and_unknown_options_are_errors():
  tokens, mask = _inputs()
  encoder = _encoder(block="plusplus", pooling="last")
  params = encoder.init(jax.random.PRNGKey(0), tokens, mask, deterministic=True)
  run = jax.jit(lambda t: encoder.apply(params, t, mask, deterministic=True))
  noisy = jnp.where(mask, tokens, 7)
  np.testing.assert_allclose(np.asarray(run(noisy)), np.asarray(run(tokens)), rtol=1e-5,
                             atol=1e-5)
  for options, match in [({"block": "postnorm"}, "plusplus"), ({"pooling": "first"}, "last"),
                         ({"block": "plusplus", "glu": "relu"}, "sigmoid")]:
    with pytest.raises(ValueError, match=match):
      _init(**options)
  with pytest.raises(ValueError, match="linear"):
    Classifier(encoder=_encoder(), num_classes=3, head="deep").init(
        jax.random.PRNGKey(0), {"inputs": tokens, "mask": mask}, deterministic=True)


@pytest.mark.parametrize("side,patch", [(6, 2), (6, 3), (4, 1)])
def test_image_patches_cut_row_major_squares(side, patch):
  pixels = np.arange(2 * side * side).reshape(2, side * side)
  squares = np.asarray(image_patches(jnp.asarray(pixels), patch))
  image = pixels.reshape(2, side, side)
  grid = side // patch
  naive = [[image[b, r * patch:(r + 1) * patch, c * patch:(c + 1) * patch].ravel()
            for r in range(grid) for c in range(grid)] for b in range(2)]
  np.testing.assert_array_equal(squares, np.array(naive))


def test_patch_embedding_is_a_dense_map_of_each_square_and_masks_partial_squares():
  """patch=2 on a 4x4 image: 4 tokens, each Dense(its 4 scaled pixels); a square with any pad is
  a pad, so nothing in it (real pixels included) reaches the pooled features."""
  side, patch = 4, 2
  encoder = Encoder(vocab_size=256, max_len=side * side, dim=D, num_layers=1, num_heads=2,
                    mlp_dim=MLP, dropout_rate=0.0, mixer_factory=MIXER, embedding="dense",
                    patch=patch)
  tokens = jax.random.randint(jax.random.PRNGKey(3), (2, side * side), 0, 256)
  mask = jnp.arange(side * side)[None, :] < jnp.array([16, 14])[:, None]
  params = encoder.init(jax.random.PRNGKey(0), tokens, mask, deterministic=True)
  _, state = encoder.apply(params, tokens, mask, deterministic=True, capture_intermediates=True)
  embedded = np.asarray(state["intermediates"]["embed"]["__call__"][0], np.float64)
  scaled = np.asarray(tokens, np.float64).reshape(2, 2, 2, 2, 2).swapaxes(2, 3).reshape(2, 4, 4)
  kernel = np.asarray(params["params"]["embed"]["kernel"], np.float64)
  bias = np.asarray(params["params"]["embed"]["bias"], np.float64)
  np.testing.assert_allclose(embedded, (scaled / 127.5 - 1) @ kernel + bias, rtol=1e-5, atol=1e-5)
  # Example 1's last square (rows 2-3, columns 2-3) holds two pads: all four pixels are ignored.
  last_square = np.zeros(side * side, bool)
  last_square[[10, 11, 14, 15]] = True
  changed = jnp.where(last_square[None] & (jnp.arange(2) == 1)[:, None], 255 - tokens, tokens)
  run = jax.jit(lambda t: encoder.apply(params, t, mask, deterministic=True))
  np.testing.assert_allclose(np.asarray(run(changed)), np.asarray(run(tokens)), rtol=1e-5,
                             atol=1e-5)


@pytest.mark.parametrize("options,length,match", [
    ({"embedding": "token", "patch": 2}, 16, "embedding=dense"),
    ({"embedding": "dense", "patch": 0}, 16, "at least 1"),
    ({"embedding": "dense", "patch": 2}, 12, "square image"),
    ({"embedding": "dense", "patch": 3}, 16, "divides by 3")])
def test_patch_embedding_refuses_what_it_cannot_cut(options, length, match):
  encoder = Encoder(vocab_size=256, max_len=length, dim=D, num_layers=1, num_heads=2,
                    mlp_dim=MLP, dropout_rate=0.0, mixer_factory=MIXER, **options)
  tokens = jnp.ones((1, length), jnp.int32)
  with pytest.raises(ValueError, match=match):
    encoder.init(jax.random.PRNGKey(0), tokens, tokens > 0, deterministic=True)
