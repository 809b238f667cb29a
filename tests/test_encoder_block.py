"""The encoder's two block kinds: prenorm (default) and the Latte paper's "++" block."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.models.encoder import Encoder
from lra.models.mixers.latte import LatteMixer

D, MLP, T = 8, 16, 12


def _encoder(block):
  return Encoder(vocab_size=11, max_len=T, dim=D, num_layers=1, num_heads=2, mlp_dim=MLP,
                 dropout_rate=0.0, mixer_factory=functools.partial(LatteMixer, num_latents=4),
                 block=block)


def _init(block):
  tokens = jnp.ones((2, T), jnp.int32)
  mask = jnp.arange(T)[None, :] < jnp.array([[T], [T - 5]])
  return _encoder(block), _encoder(block).init(jax.random.PRNGKey(0), tokens, mask,
                                               deterministic=True), tokens, mask


def test_plusplus_adds_gate_projection_and_gated_mlp_weights():
  """++ = prenorm - 2 LayerNorms + 2 RMSNorms + D x D gate and out + one more D x mlp_dim Dense."""
  count = lambda p: sum(a.size for a in jax.tree.leaves(p))
  _, pre, _, _ = _init("prenorm")
  _, plus, _, _ = _init("plusplus")
  norms = 2 * 2 * D - 2 * D            # LayerNorm has scale and bias, RMSNorm only a scale
  extra = 2 * (D * D + D) + (D * MLP + MLP)
  assert count(plus) - count(pre) == extra - norms
  block = plus["params"]["block_0"]
  assert {"mixer_norm", "mixer_gate", "mixer_out", "mlp_norm", "mlp"} <= set(block)


def test_plusplus_ignores_pads_and_unknown_block_is_an_error():
  encoder, params, tokens, mask = _init("plusplus")
  run = jax.jit(lambda t: encoder.apply(params, t, mask, deterministic=True))
  noisy = jnp.where(mask, tokens, 7)
  np.testing.assert_allclose(np.asarray(run(noisy)), np.asarray(run(tokens)), rtol=1e-5,
                             atol=1e-5)
  with pytest.raises(ValueError, match="plusplus"):
    _init("postnorm")
