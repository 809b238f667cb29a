"""Latte-RGLRU's weights against the Latte paper's statement (ICLR version) that its RG-LRU
replaces Latte-Conv's 1-D convolution and so slightly reduces the parameter count."""
import functools

import jax
import jax.numpy as jnp
import pytest

from lra.models.encoder import Encoder
from lra.models.mixers.latte_rglru import LatentFeatures, LatteRGLRUMixer

# The paper's ListOps model: D=128, L=40 latents, 4 heads, 6 layers, MLP 4D.
D, LATENTS, HEADS, LAYERS, MLP, VOCAB, T = 128, 40, 4, 6, 512, 16, 64


def _count(module, *inputs, **kwargs):
  """Parameters of `module` (shapes only: nothing is computed)."""
  shapes = jax.eval_shape(lambda: module.init(jax.random.PRNGKey(0), *inputs, **kwargs))
  return sum(a.size for a in jax.tree.leaves(shapes))


@pytest.mark.parametrize("latent_input, combine, want", [
    ("rglru", "sum", 2 * D * D + 3 * D),       # two D x D gates with biases, the decay a
    ("rglru", "concat", 6 * D * D + 7 * D),    # a set per direction + Dense(2D -> D)
    ("conv", "sum", 3 * D * D + D),            # K=3 taps of D x D, one bias
])
def test_latent_feature_weights(latent_input, combine, want):
  x, mask = jnp.zeros((1, T, D)), jnp.ones((1, T), bool)
  assert _count(LatentFeatures(latent_input, 3, combine), x, mask) == want


def test_latte_rglru_has_slightly_fewer_weights_than_latte_conv():
  """Whole encoder at the paper's ListOps size: the RG-LRU saves D^2 - 2D per layer, under 10%."""
  tokens, mask = jnp.zeros((1, T), jnp.int32), jnp.ones((1, T), bool)

  def encoder_weights(latent_input):
    mixer = functools.partial(LatteRGLRUMixer, num_latents=LATENTS, latent_input=latent_input)
    encoder = Encoder(vocab_size=VOCAB, max_len=T, dim=D, num_layers=LAYERS, num_heads=HEADS,
                      mlp_dim=MLP, dropout_rate=0.1, mixer_factory=mixer)
    return _count(encoder, tokens, mask, deterministic=True)

  rglru, conv = encoder_weights("rglru"), encoder_weights("conv")
  assert conv - rglru == LAYERS * (D * D - 2 * D)
  assert 0 < (conv - rglru) / conv < 0.1, (rglru, conv)
