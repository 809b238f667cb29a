"""The cheap linear attention (de Brebisson & Vincent 2016) against its naive sums."""
import jax
import numpy as np
import pytest

from lra.models.mixers import cheap_linear

B, T, D = 2, 7, 5


def _inputs(seed):
  rng = np.random.default_rng(seed)
  h = rng.normal(size=(B, T, D)).astype(np.float32)
  mask = np.ones((B, T), bool)
  mask[1, 4:] = False
  h[1, 4:] = 1e3  # a pad in C would swamp every lookup
  return h, mask


def _naive(h, f, mask):
  """R_t = C h_t with C = sum over real s of f_s f_s^T, one matrix per sequence."""
  out = np.zeros_like(h)
  for b in range(B):
    c = sum(np.outer(f[b, s], f[b, s]) for s in np.flatnonzero(mask[b]))
    out[b] = h[b] @ c.T
  return out


def test_basic_form_is_the_hidden_states_gram_matrix_applied_to_each_token():
  h, mask = _inputs(0)
  with jax.default_matmul_precision("highest"):
    got = cheap_linear.cheap_linear_attention(h[:, :, None], h[:, :, None], h[:, :, None], mask)
  np.testing.assert_allclose(got[:, :, 0], _naive(h, h, mask), rtol=1e-5, atol=1e-2)


def test_gated_form_sums_outer_products_of_gated_states():
  h, mask = _inputs(1)
  mixer = cheap_linear.CheapLinearMixer(dim=D, num_heads=1, max_len=T, form="gated",
                                        output_norm=False, output_projection=False)
  params = mixer.init(jax.random.PRNGKey(0), h, mask, deterministic=True)
  gate = params["params"]["gate"]
  logits = h @ np.asarray(gate["kernel"]) + np.asarray(gate["bias"])
  f = h * 0.5 * (1 + np.tanh(logits / 2))  # sigmoid, without overflow at the pads
  with jax.default_matmul_precision("highest"):
    got, _ = mixer.apply(params, h, mask, deterministic=True)
  np.testing.assert_allclose(got * mask[..., None], _naive(h, f, mask) * mask[..., None],
                             rtol=1e-5, atol=1e-3)


@pytest.mark.usefixtures("highest_precision")  # 1e-5 is f32's; TF32 (a GPU's default) fails
def test_the_output_grows_with_the_sequence_without_normalisation():
  """No normaliser: the same tokens repeated k times give k times the lookup.

  The two sums run in different orders (on a GPU in other blocks), so an entry that cancels to
  near zero differs by f32 roundoff of the output's scale, not of itself: hence the atol.
  """
  h, _ = _inputs(2)
  mask = np.ones((1, T), bool)
  once = cheap_linear.cheap_linear_attention(*[h[:1, :, None]] * 3, mask)
  thrice = cheap_linear.cheap_linear_attention(*[np.tile(h[:1], (1, 3, 1))[:, :, None]] * 3,
                                               np.ones((1, 3 * T), bool))
  scale = float(np.abs(3 * once).max())
  np.testing.assert_allclose(thrice[:, :T], 3 * once, rtol=1e-5, atol=1e-5 * scale)
