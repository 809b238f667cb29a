"""LRA's own Reformer attention as a user layer: does the suite's Reformer sit at chance on squares
because of the model or because of the suite (issue 78)?

What runs is google-research/long-range-arena `lra_benchmarks/models/reformer/
reformer_attention.py`, unedited, loaded from the folder LRA_CODE_CLONE names (default
~/.cache/lra/refs/long-range-arena: a clone of that repository, or a folder holding the file); it
is read, never copied here. Its function `lsh_attention_single_batch` (hashing, sorting, chunks,
attention, unsorting) is called on each example as their `ReformerAttention` calls it; what their
module does around it is redone here, as their code does it: the input padded at the end by
chunk_len - T mod chunk_len zero rows (always at least one), the `query` and `value` projections
without bias and with Xavier-uniform kernels (their `ReformerBlock`), no output projection, the
padding cut off. Their heads are joined as their code joins them: the [B,H,T',Dh] result of their
two vmaps is reshaped to [B,T',H*Dh] without moving the head axis, so the row of position t holds
positions H*t .. H*t+H-1 (mod T') of head floor(H*t/T'), not position t of every head. That is
what LRA's Reformer rows ran, so it is kept (tests/test_own_code.py checks it against a dense
formula of their code).

Their settings are their module's defaults, which no LRA config changes: chunk_len=10 (it only
sets the padding), n_hashes=1, n_buckets=10, so the padded sequence is cut into 10 chunks.

Their file was written for JAX and Flax of 2020. It loads and runs unedited with stand-ins for
what today's JAX and Flax no longer have, present only in their module's namespace:
  `flax.nn` or `flax.deprecated.nn` (the pre-Linen API): `Module.partial` and the two
    initialisers their class defaults name (nothing of their Module is run), and
    `stochastic`/`make_rng`, with which they draw a fixed key: here one split of the key they
    give; which fixed key draws their rotations does not change what the layer is.
  `jax.lax.tie_in`: the identity (what it has been in JAX since 2020).
  `jax.custom_transforms`/`jax.defvjp_all`: their custom gradient of a permutation (a gather of
    the output gradient by the inverse permutation, a TPU speed choice per their comment) is left
    to JAX's own gradient of the same gather and sort, which gives the same values.

Not the suite's mixer contract: their attention has no padding mask (pads are hashed and
attended) and its chunks depend on the padded length, so it is not padding-invariant; its logits,
scaled up by sqrt(Dh), overflow on the contract check's huge rows; and its chunks (with the heads'
join) leave some outputs blind to some tokens. `lra check` fails 5 of its 11 properties (padding
invariance, bidirectional, finite gradients and forward derivatives on huge rows, memory: chunks
of T/10). Run it only where every example has the same length (Image, Pathfinder, squares).

  lra run pathfinder tools/own_code/reformer_own.py:ReformerOwn --preset squares
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

CLONE_ENV = "LRA_CODE_CLONE"
DEFAULT_CLONE = "~/.cache/lra/refs/long-range-arena"
IN_REPOSITORY = Path("lra_benchmarks/models/reformer/reformer_attention.py")


def source_file(clone: str | os.PathLike | None = None) -> Path:
  """Their reformer_attention.py: in the folder given (or LRA_CODE_CLONE's), or in a clone of
  google-research/long-range-arena there."""
  root = Path(clone or os.environ.get(CLONE_ENV) or DEFAULT_CLONE).expanduser()
  for path in (root, root / IN_REPOSITORY.name, root / IN_REPOSITORY):
    if path.is_file():
      return path
  raise FileNotFoundError(
      f"no {IN_REPOSITORY.name} in {root} (nor {root / IN_REPOSITORY}): set {CLONE_ENV} to a "
      "clone of google-research/long-range-arena")


class _OldModule:
  """What their module-level code touches of pre-Linen `flax.nn.Module`: `partial`."""

  @classmethod
  def partial(cls, **kwargs):
    return functools.partial(cls, **kwargs)


def _old_flax_nn() -> types.ModuleType:
  """The pre-Linen `flax.nn` names their file uses."""
  old = types.ModuleType("flax.nn")
  old.Module = _OldModule
  old.linear = types.SimpleNamespace(default_kernel_init=nn.initializers.lecun_normal())
  old.initializers = nn.initializers
  keys = []

  @contextlib.contextmanager
  def stochastic(key):
    keys.append(key)
    try:
      yield
    finally:
      keys.pop()

  def make_rng():
    keys[-1], drawn = jax.random.split(keys[-1])
    return drawn

  old.stochastic, old.make_rng = stochastic, make_rng
  return old


class _Extended:
  """A module's names, with some added (and those taking precedence)."""

  def __init__(self, base, **added):
    self._base, self._added = base, added

  def __getattr__(self, name):
    return self._added[name] if name in self._added else getattr(self._base, name)


def _old_jax() -> _Extended:
  """Today's `jax` with the three names of 2020 their functions call."""
  return _Extended(jax, lax=_Extended(jax.lax, tie_in=lambda _, y: y),
                   custom_transforms=lambda fn: fn, defvjp_all=lambda fn, vjp: None)


@functools.cache
def load(path: Path | None = None) -> types.ModuleType:
  """Their module, under a private name, its `jax` and `flax.nn` the stand-ins above."""
  path = Path(path) if path is not None else source_file()
  spec = importlib.util.spec_from_file_location("_lra_own_reformer_attention", path)
  module = importlib.util.module_from_spec(spec)
  # `from flax import nn` (their first versions) or `from flax.deprecated import nn` (since
  # b4f9fed) finds the stand-in here while their file loads, and only then.
  old_nn = _old_flax_nn()
  deprecated = types.ModuleType("flax.deprecated")
  deprecated.nn = old_nn
  stand_ins = {"flax.nn": old_nn, "flax.deprecated": deprecated, "flax.deprecated.nn": old_nn}
  saved = {name: sys.modules.get(name) for name in stand_ins}
  sys.modules.update(stand_ins)
  try:
    spec.loader.exec_module(module)
  finally:
    for name, before in saved.items():
      if before is None:
        del sys.modules[name]
      else:
        sys.modules[name] = before
  module.jax = _old_jax()  # read when their functions run, not when they load
  return module


def their_attention(query: jax.Array, value: jax.Array, *, n_buckets: int,
                    n_hashes: int) -> jax.Array:
  """Their LSH attention over a batch, as their ReformerAttention calls it: [B,T',H,Dh] ->
  [B,T',H,Dh] (T' a multiple of n_hashes x n_buckets)."""
  single = load().lsh_attention_single_batch
  return jax.vmap(single, in_axes=(0, 0, None, None))(query, value, n_buckets, n_hashes)


class ReformerOwn(nn.Module):
  """LRA's Reformer attention layer: its projections and its LSH attention, no output projection."""
  dim: int
  num_heads: int
  max_len: int
  chunk_len: int = 10
  n_hashes: int = 1
  n_buckets: int = 10

  @nn.compact
  def __call__(self, x, mask, *, deterministic, carry=None):
    """x: [B,T,D], mask: [B,T] (read by nothing, as in their code) -> ([B,T,D], carry)."""
    del mask
    batch, length, _ = x.shape
    extra = self.chunk_len - length % self.chunk_len
    padded = jnp.pad(x, ((0, 0), (0, extra), (0, 0)))
    project = functools.partial(nn.DenseGeneral, (self.num_heads, self.dim // self.num_heads),
                                use_bias=False, kernel_init=nn.initializers.xavier_uniform())
    query, value = project(name="query")(padded), project(name="value")(padded)
    y = their_attention(query.astype(jnp.float32), value.astype(jnp.float32),
                        n_buckets=self.n_buckets, n_hashes=self.n_hashes)
    return y.reshape(batch, length + extra, self.dim)[:, :length].astype(x.dtype), carry
