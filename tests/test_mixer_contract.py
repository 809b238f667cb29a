"""The mixer contract (lra.models.mixers.contract, also run by `lra check`) over the registry."""
import functools
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.configs.common import mixer_configs
from lra.models.mixers import MIXERS
from lra.models.mixers import contract as contract_module
from lra.models.mixers.contract import PROPERTIES, MixerContract
from lra.models.mixers.latte import latte_attention

# Options that change a mixer's maths get the contract too: test id -> (mixer, overrides).
VARIANTS = {"latte+vapor": ("latte", {"vapor": True}),
            "latte_rglru+conv": ("latte_rglru", {"latent_input": "conv"}),
            "latte_rglru+concat": ("latte_rglru", {"combine": "concat"}),
            "latte_rglru_swa+rope": ("latte_rglru_swa", {"rope": True, "combine": "concat"}),
            # Patterns smaller than the contract's T=24, so that the sparsity itself is checked.
            "longformer+small": ("longformer", {"window": 5, "num_global": 2}),
            # No global token: the pad queries beyond the window's reach have no key at all.
            "longformer+no_global": ("longformer", {"window": 5, "num_global": 0}),
            "bigbird+small": ("bigbird", {"block": 4, "num_random": 2}),
            "reformer+rounds": ("reformer", {"num_hashes": 3, "num_buckets": 4, "chunk_len": 4}),
            # Chunks of 4: the second row's last chunk is all pads.
            "mega+small": ("mega", {"chunk_size": 4}),
            # Blocks smaller than T=24 (the defaults of 50 hold the whole sequence in one), with
            # pads in a partial block and in whole ones.
            "local+small": ("local", {"block": 4}),
            "sparse+small": ("sparse", {"block": 4, "summary": 1, "num_global": 1}),
            "sparse+no_global": ("sparse", {"block": 5, "summary": 2, "num_global": 0}),
            # The LRA code's row softmax in place of Sinkhorn balancing, on the same small blocks.
            "sinkhorn+small": ("sinkhorn", {"block": 4}),
            "sinkhorn+softmax": ("sinkhorn", {"block": 5, "iterations": 0, "temperature": 1.0}),
            "synthesizer+dense": ("synthesizer", {"mode": "dense", "dot_product": False}),
            "synthesizer+factorized": ("synthesizer", {"mode": "factorized_random", "rank": 4})}
FAST = [p for p in PROPERTIES if p != "memory"]
# (variant, property) pairs a variant fails by design. Strict: if one passes, its entry must go.
BY_DESIGN = {("longformer+no_global", "bidirectional"):
             "a window of 5 with no global token reaches 2 positions each way per layer",
             ("local+small", "bidirectional"): "one layer of blocks of 4 reaches its block only",
             ("sparse+no_global", "bidirectional"):
             "the last real token (16: offset 1 of its block of 5) is no summary cell, so the "
             "first output reaches it only in a second layer"}


@functools.cache
def contract(variant: str) -> MixerContract:
  """One per mixer or variant, at its default settings (as `lra check` runs it); its compiled
  functions are shared by every property test of that mixer."""
  name, overrides = VARIANTS.get(variant, (variant, {}))
  return MixerContract(MIXERS[name], {**mixer_configs()[name].to_dict(), **overrides})


def test_every_mixer_has_a_config_block_and_description():
  cfg = mixer_configs()
  assert sorted(cfg.keys()) == sorted(MIXERS)
  for cls in MIXERS.values():
    assert (cls.__doc__ or "").strip(), f"{cls.__name__} needs a one-line docstring for `lra list`"


@pytest.mark.parametrize("variant, prop", [
    pytest.param(v, p, id=f"{v}-{p.replace(' ', '_')}", marks=pytest.mark.xfail(
        reason=BY_DESIGN[v, p], strict=True) if (v, p) in BY_DESIGN else ())
    for v in sorted(MIXERS) + sorted(VARIANTS) for p in FAST])
def test_contract(variant, prop):
  result = contract(variant).check(prop, catch=False)
  assert result.passed, result.line()


@pytest.mark.parametrize("name", sorted(set(MIXERS) - {"softmax"}))
def test_memory_at_8k_is_far_below_softmax(name):
  """Every mixer but the softmax baseline and those quadratic by design is sub-quadratic: at
  T=8192 with its default settings, forward+backward plans under 1/8 of softmax's memory. One
  quadratic by design says why (its class's QUADRATIC) and grows no faster than T^2."""
  result = contract(name).check("memory", catch=False)
  assert result.passed, result.line()
  quadratic = getattr(MIXERS[name], "QUADRATIC", None)
  assert ("quadratic by design" in result.detail) == bool(quadratic), result.line()


def test_only_the_synthesizer_and_the_fixed_sparse_pattern_are_quadratic_by_design():
  """The exemption is a mixer's own statement, one line each, and rare: a new one is a choice
  to read here (docs/design.md lists them)."""
  assert sorted(m for m, cls in MIXERS.items() if getattr(cls, "QUADRATIC", None)) == [
      "sparse", "synthesizer"]


class _CubicByMistake(nn.Module):
  """Declared quadratic, but a [T,T,T] array is formed (three-way products): memory grows as T^3."""
  dim: int
  num_heads: int
  max_len: int
  QUADRATIC = "declared quadratic, built cubic"

  @nn.compact
  def __call__(self, x, mask, *, deterministic, carry=None):
    h = nn.Dense(self.dim)(x)
    triples = jnp.einsum("btd,bsd,bud->btsu", h, x, x)                            # [B,T,T,T]
    return h * jnp.mean(jnp.tanh(triples), axis=(2, 3))[..., None], carry


def test_quadratic_by_design_still_fails_a_cubic_array(monkeypatch):
  monkeypatch.setattr(contract_module, "MEMORY_T", 256)  # compiled at T=128 and 256, never run
  result = MixerContract(_CubicByMistake, {}).check("memory", catch=False)
  growth = float(re.search(r"grows ([0-9.]+)x", result.detail).group(1))
  assert result.passed is False and growth > 7, result.line()  # 8x, less XLA's fixed buffers


class _MaskAfterExp(nn.Module):
  """Latte's old bug in miniature: pads are dropped after exp, so a large pad logit's inf meets
  a zero weight; the forward stays finite, the gradient is 0 * inf = NaN."""
  dim: int
  num_heads: int
  max_len: int

  @nn.compact
  def __call__(self, x, mask, *, deterministic, carry=None):
    weights = jnp.where(mask[..., None], jnp.exp(nn.Dense(1)(x)), 0.0)              # [B,T,1]
    pooled = jnp.sum(weights * x, axis=1, keepdims=True) / jnp.sum(weights, axis=1, keepdims=True)
    return jnp.broadcast_to(pooled, x.shape), carry


def test_finite_gradients_catches_masking_after_exp():
  subject = MixerContract(_MaskAfterExp, {})
  assert subject.check("padding invariance").passed  # the forward alone shows nothing wrong
  result = subject.check("finite gradients")
  # Which gradients show the NaN first (inputs at huge rows on a CPU, parameters too) is not the
  # point: with matmul inputs rounded to TF32 (emulated on a CPU) it was the parameters alone.
  assert result.passed is False and "NaN/inf w.r.t." in result.detail


class _TinyFloor(nn.Module):
  """Attention over the real keys within one position, normalised by max(total, tiny): the pads
  two past the last real token have no key. Values and gradients stay finite; the tangent there
  is 0 / tiny^2 = NaN."""
  dim: int
  num_heads: int
  max_len: int

  @nn.compact
  def __call__(self, x, mask, *, deterministic, carry=None):
    scores = jnp.einsum("btd,bsd->bts", nn.Dense(self.dim)(x), x)
    t = jnp.arange(x.shape[1])
    allowed = (jnp.abs(t[:, None] - t[None, :]) <= 1)[None] & mask[:, None, :]
    top = jnp.max(jnp.where(allowed, scores, -jnp.inf), axis=-1, keepdims=True)
    weights = jnp.exp(jnp.where(allowed, scores - jax.lax.stop_gradient(
        jnp.where(jnp.isfinite(top), top, 0.0)), -jnp.inf))
    total = jnp.maximum(weights.sum(-1, keepdims=True), jnp.finfo(weights.dtype).tiny)
    return jnp.einsum("bts,bsd->btd", weights / total, x), carry


def test_forward_derivatives_catch_a_tiny_floor():
  subject = MixerContract(_TinyFloor, {})
  assert subject.check("finite gradients").passed  # backpropagation shows nothing wrong
  result = subject.check("forward derivatives")
  assert result.passed is False and "NaN/inf tangents of outputs" in result.detail


def test_latte_pad_logit_far_above_the_real_max_has_finite_gradients():
  """A pad key logit 100 above the real ones once overflowed exp under the mask: the forward
  stayed finite, the gradient was NaN (0 * inf)."""
  q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (1, 5, 1, 3)) for i in range(3))
  mask = jnp.array([[True, True, True, False, False]])
  k = k.at[0, 3].set(100.0)

  def loss(q, k, v):
    return jnp.sum(latte_attention(q, k, v, mask)[:, :3])

  grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)  # one compile, not one per op
  assert all(np.isfinite(np.asarray(g)).all() for g in grads)
  np.testing.assert_array_equal(np.asarray(grads[1])[0, 3:], 0.0)  # pads get no gradient


def test_execution_path_names_softmax_implementation_and_chunks_and_the_synthesizers():
  from lra.models.mixers import execution_path
  assert execution_path("softmax", {"query_chunk": 0, "implementation": "auto"},
                        "float32") == "einsum (one piece)"
  assert execution_path("softmax", {"query_chunk": 128, "implementation": "auto"}, "float32",
                        head_dim=16) == "einsum (query chunks of 128)"  # f32: einsum anywhere
  assert execution_path("softmax", {"query_chunk": 128, "implementation": "xla"},
                        "float32") == "xla"
  assert execution_path("synthesizer", {"query_chunk": 128}, "bfloat16") == (
      "einsum (query chunks of 128)")
  assert execution_path("latte", mixer_configs()["latte"].to_dict(), "float32") == ""


def test_matmul_roundoff_follows_the_backend_and_the_precision_in_force():
  assert contract_module.matmul_roundoff("gpu") == 2.0 ** -11        # TF32 by default
  assert contract_module.matmul_roundoff("gpu", "highest") == 2.0 ** -24
  assert contract_module.matmul_roundoff("tpu") == 2.0 ** -8          # one bf16 pass
  assert contract_module.matmul_roundoff("cpu", "bfloat16") == 2.0 ** -24  # ignored on a CPU
  with jax.default_matmul_precision("float32"):
    assert contract_module.matmul_roundoff("gpu") == 2.0 ** -24


class _MeanOverAllTokens(nn.Module):
  """A leak: the mean over time includes pads."""
  dim: int
  num_heads: int
  max_len: int

  @nn.compact
  def __call__(self, x, mask, *, deterministic, carry=None):
    return nn.Dense(self.dim)(x) + jnp.mean(x, axis=1, keepdims=True), carry


@pytest.mark.parametrize("backend", ["gpu", "tpu"])
def test_padding_tolerance_under_tf32_or_bf16_still_catches_a_leak(monkeypatch, backend):
  """With the tolerance an accelerator's matmul rounding needs, a mixer that averages over pads
  still fails padding invariance, and softmax passes."""
  monkeypatch.setattr(contract_module, "matmul_roundoff",
                      functools.partial(contract_module.matmul_roundoff, backend))
  leaky = MixerContract(_MeanOverAllTokens, {})
  assert leaky.tolerance(contract_module.TOLERANCE) > contract_module.TOLERANCE
  assert leaky.check("padding invariance").passed is False
  assert contract("softmax").check("padding invariance").passed
