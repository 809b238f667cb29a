"""The Performer authors' own attention as a user layer: does the suite's Performer sit at chance on
squares because of the model or because of the suite (issue 78)?

What runs is google-research/google-research `performer/fast_attention/jax/fast_attention.py`,
unedited, loaded from the folder LRA_PERFORMER_CLONE names (default ~/.cache/lra/refs/performer:
a folder holding that file, or a clone of the whole repository); it is read, never copied here.
Around it sit the suite's own Performer projections (`qkv` [D,3,H,Dh] and `out`, as
models/mixers/performer.py makes them), so only the attention differs from the `performer` row.

Settings, as the suite's Performer names them:
  kernel="relu" (default): what the squares, laptop and LRA presets run (configs/common.py
    `lra_mixers`), and what LRA's Performer ran: their make_fast_generalized_attention with its
    defaults (relu(x) + 1e-3 on the head dimensions, no random features, nothing redrawn).
  kernel="softmax": their make_fast_softmax_attention (FAVOR+: num_features positive orthogonal
    features, their stabiliser 1e-6, redraw_features=redraw).

Pads: their attention has no padding mask (its `bias` argument is read by nothing). So a pad's key
is set to zero (it then cannot move the keys' stabiliser) and the values get one more channel, the
mask: their output's last channel is then the share of each query's attention that falls on real
keys, and the other channels divided by it are attention over real keys only (their normaliser
cancels in the ratio).

One stand-in lets the file load without `gin` (gin-config), which it reads only to register
names: a `gin` whose decorators return what they are given, present only while the file loads.
Their code broadcasts arrays of different rank, so it is called with rank promotion allowed.

  lra check tools/own_code/performer_own.py:PerformerOwn [--fit]
  lra run pathfinder tools/own_code/performer_own.py:PerformerOwn --preset squares
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys
import types
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra.models.mixers.projections import project_qkv

CLONE_ENV = "LRA_PERFORMER_CLONE"
DEFAULT_CLONE = "~/.cache/lra/refs/performer"
IN_REPOSITORY = Path("performer/fast_attention/jax/fast_attention.py")


def source_file(clone: str | os.PathLike | None = None) -> Path:
  """Their fast_attention.py: in the folder given (or LRA_PERFORMER_CLONE's), or in a clone of
  google-research/google-research there."""
  root = Path(clone or os.environ.get(CLONE_ENV) or DEFAULT_CLONE).expanduser()
  for path in (root, root / "fast_attention.py", root / IN_REPOSITORY):
    if path.is_file():
      return path
  raise FileNotFoundError(
      f"no fast_attention.py in {root} (nor {root / IN_REPOSITORY}): set {CLONE_ENV} to a folder "
      "holding google-research/google-research's performer/fast_attention/jax/fast_attention.py")


@contextlib.contextmanager
def _gin_stand_in():
  """A `gin` whose `configurable` and `external_configurable` return what they are given, while
  no real gin is installed."""
  if importlib.util.find_spec("gin") is not None or "gin" in sys.modules:
    yield
    return
  gin = sys.modules["gin"] = types.ModuleType("gin")

  def configurable(*args, **kwargs):
    if len(args) == 1 and callable(args[0]) and not kwargs:
      return args[0]  # @gin.configurable
    return lambda fn: fn  # @gin.configurable("name", ...)

  gin.configurable = configurable
  gin.external_configurable = lambda fn, *args, **kwargs: fn
  try:
    yield
  finally:
    del sys.modules["gin"]


@functools.cache
def load(path: Path | None = None) -> types.ModuleType:
  """Their module, under a private name (so nothing of the user's called `fast_attention` is
  shadowed)."""
  path = Path(path) if path is not None else source_file()
  spec = importlib.util.spec_from_file_location("_lra_own_performer_fast_attention", path)
  module = importlib.util.module_from_spec(spec)
  with _gin_stand_in():
    spec.loader.exec_module(module)
  return module


def their_attention(head_dim: int, kernel: str, num_features: int, redraw: bool):
  """Their attention function for these settings: (q, k, v [B,T,H,Dh]) -> [B,T,H,Dv]. Built at
  every call, as their code builds it per layer (no array drawn under one trace is kept)."""
  fast = load()
  if kernel == "relu":
    return fast.make_fast_generalized_attention(head_dim)
  if kernel == "softmax":
    return fast.make_fast_softmax_attention(head_dim, nb_features=num_features,
                                            redraw_features=redraw)
  raise ValueError(f"PerformerOwn: kernel must be 'relu' or 'softmax', got {kernel!r}")


def masked_attention(attend, q: jax.Array, k: jax.Array, v: jax.Array,
                     mask: jax.Array) -> jax.Array:
  """Their `attend` over real keys only (the module docstring says how), in float32."""
  real = mask[:, :, None, None]
  k = jnp.where(real, k, 0.0)
  share = jnp.broadcast_to(real, v.shape[:-1] + (1,))
  v = jnp.concatenate([jnp.where(real, v, 0.0), share.astype(v.dtype)], axis=-1)
  f32 = jnp.float32
  with jax.numpy_rank_promotion("allow"):
    out = attend(q.astype(f32), k.astype(f32), v.astype(f32))
  # A row with no real key: its values and its share are both 0; it stays 0, not NaN.
  return out[..., :-1] / jnp.maximum(out[..., -1:], jnp.finfo(f32).tiny)


class PerformerOwn(nn.Module):
  """The suite's Performer projections around the Performer authors' FAVOR attention."""
  dim: int
  num_heads: int
  max_len: int
  kernel: str = "relu"
  num_features: int = 256
  redraw: bool = False

  @nn.compact
  def __call__(self, x, mask, *, deterministic, carry=None):
    """x: [B,T,D], mask: [B,T] (True on real tokens) -> ([B,T,D], carry)."""
    head_dim = self.dim // self.num_heads
    q, k, v = project_qkv(x, self.num_heads, head_dim)
    attend = their_attention(head_dim, self.kernel, self.num_features, self.redraw)
    y = masked_attention(attend, q, k, v, mask).astype(x.dtype)
    return nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(y), carry
