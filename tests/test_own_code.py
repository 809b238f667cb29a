"""tools/own_code/: third-party attention run from a clone as a user layer. Each adapter must give
what the authors' function gives on the same projections (Performer: a direct call; LRA's
Reformer: a dense formula written from their code); without the clone (LRA_PERFORMER_CLONE,
default ~/.cache/lra/refs/performer; LRA_CODE_CLONE, default ~/.cache/lra/refs/long-range-arena)
these tests skip."""
import importlib.util
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _adapter(name):
  spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / "own_code" / f"{name}.py")
  module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # flax reads it
  spec.loader.exec_module(module)
  return module


def _needs_clone(adapter, what):
  try:
    adapter.source_file()
    missing = False
  except FileNotFoundError:
    missing = True
  return pytest.mark.skipif(
      missing, reason=f"no {what} clone ({adapter.CLONE_ENV} or {adapter.DEFAULT_CLONE})")


performer_own = _adapter("performer_own")
reformer_own = _adapter("reformer_own")
needs_clone = _needs_clone(performer_own, "Performer")
needs_lra_clone = _needs_clone(reformer_own, "long-range-arena")

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


@pytest.mark.parametrize("adapter", [performer_own, reformer_own], ids=["performer", "reformer"])
def test_missing_clone_is_named(tmp_path, adapter):
  """Without the file, the error names the variable to set."""
  with pytest.raises(FileNotFoundError, match=adapter.CLONE_ENV):
    adapter.source_file(tmp_path)


def _lra_reformer_dense(params, x, num_heads, chunk_len=10, n_buckets=10):
  """LRA's Reformer layer as a dense formula, written from reading their code: pad by
  chunk_len - T mod chunk_len zero rows; per head, bucket = argmax([qR, -qR]) with one fixed R
  (the stand-in's key: one split of PRNGKey(0)); sort by (bucket, position) and cut into
  n_buckets chunks; a query attends to the keys (= its own queries, unnormalised) of its chunk
  and of the one before it, the first chunk's being the last; logits q.k * sqrt(Dh) (their
  scale); no pad mask, no output projection; and the heads joined as their code joins them, the
  [B,H,T',Dh] output read as [B,T',H*Dh] without moving the head axis, so that the row of a
  position holds H*Dh / Dh consecutive positions of one head."""
  t = x.shape[1]
  padded = jnp.pad(x, ((0, 0), (0, chunk_len - t % chunk_len), (0, 0)))
  q = jnp.einsum("btd,dhe->bthe", padded, params["query"]["kernel"])
  v = jnp.einsum("btd,dhe->bthe", padded, params["value"]["kernel"])
  length, dh = q.shape[1], q.shape[-1]
  rotations = jax.random.normal(jax.random.split(jax.random.PRNGKey(0))[1],
                                (dh, 1, n_buckets // 2))[:, 0]
  per_chunk = length // n_buckets

  def one_head(q, v):  # [T',Dh]
    rotated = q @ rotations
    bucket = jnp.argmax(jnp.concatenate([rotated, -rotated], -1), -1)
    order = jnp.argsort(bucket * length + jnp.arange(length))
    chunk = jnp.zeros(length, int).at[order].set(jnp.arange(length) // per_chunk)
    before = (chunk[:, None] - 1) % n_buckets  # the chunk looked back to, wrapping around
    allowed = (chunk[None, :] == chunk[:, None]) | (chunk[None, :] == before)
    logits = jnp.where(allowed, q @ q.T * dh ** 0.5, -jnp.inf)
    return jax.nn.softmax(logits, -1) @ v

  y = jax.vmap(jax.vmap(one_head, in_axes=(1, 1), out_axes=0))(q, v)  # [B,H,T',Dh]
  return y.reshape(x.shape[0], length, -1)[:, :t]


@needs_lra_clone
def test_lra_reformer_adapter_equals_their_formula():
  """Their function under today's JAX (through the stand-ins) gives the dense formula of their
  code, values and gradients, float32 (relative to the largest entry)."""
  layer = reformer_own.ReformerOwn(dim=D, num_heads=H, max_len=T)
  x = jax.random.normal(jax.random.PRNGKey(0), (B, T, D))
  mask = jnp.ones((B, T), bool)
  params = layer.init(jax.random.PRNGKey(1), x, mask, deterministic=True)
  y, _ = layer.apply(params, x, mask, deterministic=True)
  want = _lra_reformer_dense(params["params"], x, H)
  np.testing.assert_allclose(y, want, rtol=0, atol=RTOL * float(jnp.max(jnp.abs(want))))
  cotangent = jax.random.normal(jax.random.PRNGKey(2), y.shape)
  ours = jax.grad(lambda p: jnp.sum(layer.apply(p, x, mask, deterministic=True)[0] * cotangent))(
      params)["params"]
  dense = jax.grad(lambda p: jnp.sum(_lra_reformer_dense(p, x, H) * cotangent))(params["params"])
  for name in ("query", "value"):
    got, exp = ours[name]["kernel"], dense[name]["kernel"]
    np.testing.assert_allclose(got, exp, rtol=0, atol=1e-4 * float(jnp.max(jnp.abs(exp))))
