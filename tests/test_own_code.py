"""tools/own_code/: third-party attention run from a clone as a user layer. Each adapter must give
what a direct call of the authors' function gives on the same projections; without the clone
(LRA_PERFORMER_CLONE, default ~/.cache/lra/refs/performer) these tests skip."""
import importlib.util
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "performer_own", ROOT / "tools" / "own_code" / "performer_own.py")
performer_own = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)  # flax reads it
_spec.loader.exec_module(performer_own)

try:
  SOURCE = performer_own.source_file()
except FileNotFoundError:
  SOURCE = None
needs_clone = pytest.mark.skipif(
    SOURCE is None, reason=f"no Performer clone ({performer_own.CLONE_ENV} or "
    f"{performer_own.DEFAULT_CLONE})")

B, T, D, H = 2, 12, 16, 2
RTOL = 1e-5  # float32: relative to the largest |y|; the two paths differ only in rounding


def _direct(params, x, kernel):
  """The authors' function called as their code calls it (no mask), between the same
  projections."""
  fast = performer_own.load()
  p = params["qkv"]
  qkv = jnp.einsum("btd,dkhe->btkhe", x, p["kernel"]) + p["bias"][None, None]
  q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
  if kernel == "relu":
    attend = fast.make_fast_generalized_attention(D // H)
  else:
    attend = fast.make_fast_softmax_attention(D // H, nb_features=256, redraw_features=False)
  with jax.numpy_rank_promotion("allow"):
    y = attend(q, k, v)
  return jnp.einsum("bthe,hed->btd", y, params["out"]["kernel"]) + params["out"]["bias"][None, None]


@needs_clone
@pytest.mark.parametrize("kernel", ["relu", "softmax"])
def test_adapter_equals_their_attention(kernel):
  """All tokens real: the adapter's output is their attention's, to float32 rounding; with pads,
  the real tokens' outputs are their attention's on the real tokens alone."""
  layer = performer_own.PerformerOwn(dim=D, num_heads=H, max_len=T, kernel=kernel)
  x = jax.random.normal(jax.random.PRNGKey(0), (B, T, D))
  full = jnp.ones((B, T), bool)
  params = layer.init(jax.random.PRNGKey(1), x, full, deterministic=True)
  y, carry = layer.apply(params, x, full, deterministic=True)
  want = _direct(params["params"], x, kernel)
  assert carry is None and y.dtype == jnp.float32
  scale = float(jnp.max(jnp.abs(want)))
  np.testing.assert_allclose(y, want, rtol=0, atol=RTOL * scale)

  real = T - 5
  padded = x.at[:, real:].set(100.0)  # pads at a value that would dominate, were they read
  mask = jnp.arange(T)[None, :] < real
  y_pad, _ = layer.apply(params, padded, jnp.broadcast_to(mask, (B, T)), deterministic=True)
  want_real = _direct(params["params"], x[:, :real], kernel)
  np.testing.assert_allclose(y_pad[:, :real], want_real, rtol=0, atol=RTOL * scale)


def test_missing_clone_is_named(tmp_path):
  """Without the file, the error names the variable to set."""
  with pytest.raises(FileNotFoundError, match=performer_own.CLONE_ENV):
    performer_own.source_file(tmp_path)
