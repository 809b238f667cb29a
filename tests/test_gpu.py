"""What exists only on an NVIDIA GPU: cuDNN's fused attention and bf16 steps as a GPU runs them.

Run with `pytest -m gpu tests/test_gpu.py`; skipped where JAX sees no GPU. Tolerances are stated
in unit roundoffs u of the compute dtype (bf16: 2^-8, f16: 2^-11) relative to the largest value
compared, so they say how many roundings a difference is worth.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lra.runs.config_loading import resolve_config
from lra.training import train
from lra.models.build import build_model, execution_path
from lra.models.mixers import softmax
from lra.tasks.contract.spec import TaskSpec

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU")]

UNIT_ROUNDOFF = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}


def _close(got, want, units, dtype, what):
  """|got - want| <= units * u(dtype) * max |want|."""
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  bound = units * UNIT_ROUNDOFF[dtype] * np.abs(want).max()
  error = np.abs(got - want).max()
  assert error <= bound, f"{what}: max |difference| {error:.3g} > {bound:.3g}"


def _attention_inputs(dtype):
  """q, k, v [2,T,H,Dh] with pads at the end of row 2 holding keys and values that would swamp
  any real output they leaked into; T=200 is not a multiple of cuDNN's tiles."""
  b, t, h, dh = 2, 200, 4, 64
  q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (b, t, h, dh)) for i in range(3))
  mask = jnp.arange(t)[None] < jnp.array([[t], [123]])
  k = jnp.where(mask[..., None, None], k, 8.0)
  v = jnp.where(mask[..., None, None], v, 100.0)
  cotangent = jax.random.normal(jax.random.PRNGKey(3), v.shape) * mask[..., None, None]
  return tuple(a.astype(dtype) for a in (q, k, v)), mask, cotangent


def _value_and_grads(implementation, q, k, v, mask, cotangent):
  def loss(q, k, v):
    y = softmax.softmax_attention(q, k, v, mask, implementation=implementation)
    return jnp.sum(y.astype(jnp.float32) * cotangent), y
  (_, y), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
  return y, grads


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_cudnn_attention_equals_the_xla_path_with_pads(dtype):
  """Values within 8u and q, k, v gradients within 16u of the largest (a leaking pad would move
  real outputs by ~100 and be far outside); both within that of f32 maths on the same inputs."""
  (q, k, v), mask, cotangent = _attention_inputs(dtype)
  cudnn = _value_and_grads("cudnn", q, k, v, mask, cotangent)
  xla = _value_and_grads("xla", q, k, v, mask, cotangent)
  with jax.default_matmul_precision("highest"):
    exact = _value_and_grads("einsum", *(a.astype(jnp.float32) for a in (q, k, v)), mask,
                             cotangent)
  real = np.asarray(mask)
  for name, (y, grads) in (("cudnn", cudnn), ("xla", xla)):
    assert np.isfinite(np.asarray(y, np.float32)).all()
    _close(np.asarray(y)[real], np.asarray(exact[0])[real], 8, dtype, f"{name} values")
    for axis, got, want in zip("qkv", grads, exact[1]):
      _close(got, want, 16, dtype, f"{name} d{axis}")
  _close(np.asarray(cudnn[0])[real], np.asarray(xla[0])[real], 8, dtype, "cudnn vs xla values")
  for axis, got, want in zip("qkv", cudnn[1], xla[1]):
    _close(got, want, 16, dtype, f"cudnn vs xla d{axis}")


def test_auto_runs_cudnn_in_bf16_and_refuses_it_in_f32():
  (q, k, v), mask, _ = _attention_inputs("bfloat16")
  attend = functools.partial(softmax.softmax_attention, implementation="auto")
  hlo = jax.jit(attend).lower(q, k, v, mask).compile().as_text()
  assert "cudnn" in hlo.lower()  # the fused kernel is a cuDNN custom call
  assert softmax.implementation_for("auto", jnp.float32, 64) == "einsum"
  with pytest.raises(ValueError, match="bfloat16 or float16"):
    softmax.implementation_for("cudnn", jnp.float32, 64)


def test_cudnn_marks_a_mask_with_holes_instead_of_reading_it_wrong():
  (q, k, v), mask, _ = _attention_inputs("bfloat16")
  holes = mask.at[0, 5].set(False)
  y = np.asarray(softmax.softmax_attention(q, k, v, holes, implementation="cudnn"), np.float32)
  assert np.isnan(y[0]).all() and np.isfinite(y[1]).all()


def _loss_and_grads(mixer, dtype):
  """Loss and parameter gradients of one training batch of a one-layer smoke model, the same
  parameters and batch in both dtypes, at the precision a run uses (f32 matmuls as TF32)."""
  config = resolve_config("listops", mixer, "smoke", [f"model.dtype={dtype}", "model.dim=64",
                                                           "model.num_heads=2"])
  spec = TaskSpec(vocab_size=16, seq_len=256, num_classes=10)
  model = build_model(config, spec)
  rng = np.random.default_rng(0)
  lengths = rng.integers(100, 257, 8)
  mask = np.arange(256)[None] < lengths[:, None]
  batch = {"inputs": np.where(mask, rng.integers(1, 16, (8, 256)), 0).astype(np.int32),
           "mask": mask, "label": rng.integers(0, 10, 8).astype(np.int32),
           "weight": np.ones(8, np.float32)}
  params = model.init(jax.random.PRNGKey(0), train.example_batch(spec, 1),
                      deterministic=True)["params"]

  def loss(p):
    logits = model.apply({"params": p}, batch, deterministic=True).astype(jnp.float32)
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]))
  value, grads = jax.jit(jax.value_and_grad(loss))(params)
  return float(value), np.concatenate([np.ravel(g) for g in jax.tree.leaves(grads)]), config


@pytest.mark.parametrize("mixer", ["softmax", "latte"])
def test_a_bf16_training_step_stays_close_to_f32(mixer):
  """bf16 blocks (f32 parameters, loss and head): loss within 1% and the gradient within 5% (L2,
  relative) of the f32 step's. Softmax runs cuDNN's fused attention in bf16."""
  loss16, grads16, config = _loss_and_grads(mixer, "bfloat16")
  loss32, grads32, _ = _loss_and_grads(mixer, "float32")
  if mixer == "softmax":
    assert execution_path(config) == "cudnn"
  assert abs(loss16 - loss32) <= 0.01 * abs(loss32), (loss16, loss32)
  error = np.linalg.norm(grads16 - grads32) / np.linalg.norm(grads32)
  assert np.linalg.norm(grads32) > 0 and error <= 0.05, error
