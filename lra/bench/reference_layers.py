"""The layers users would run instead of ours, on shared weights (`lra bench --against`).

Three references: the Latte authors' `BidLatte` (raresdolga/latte_transformer,
models/modules/latte.py) and lindermanlab/S5's `S5SSM` (s5/ssm.py), both read from a local clone
the user names and never copied here; and Flax's `MultiHeadDotProductAttention`, whose attention is
either Flax's own or `jax.nn.dot_product_attention` (no clone needed). A `Pair` holds our layer, the
reference and the map of our parameters onto the reference's names and shapes. Every map only
re-arranges entries (slices, reshapes), so it carries gradients across as well as weights.

Both sides are called as f(params, x[B,T,D], mask[B,T] bool) -> y[B,T,D].
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import errors
from lra.models.mixers import latte, s5, s5_init, softmax

# What a clone is recognised by (the file the reference lives in), and where to get it.
CLONES = {"latte": ("models/modules/latte.py",
                    "https://github.com/raresdolga/latte_transformer"),
          "s5": ("s5/ssm.py", "https://github.com/lindermanlab/S5")}


@dataclasses.dataclass(frozen=True)
class Pair:
  """Our layer and a reference on one shape.

  Attributes:
    ours, theirs: (params, x[B,T,D], mask[B,T]) -> y[B,T,D].
    init: key -> our parameters.
    init_theirs: (key, x, mask) -> the reference's own parameters (their names and shapes are
      what a map must produce).
    to_theirs: our parameters (or gradients) -> the reference's.
    masked: the reference takes a mask; False (S5) means it scans over pads, so both sides are
      compared and timed on unpadded sequences.
    reference: what the reference is, for the records.
  """
  ours: Callable
  theirs: Callable
  init: Callable
  init_theirs: Callable
  to_theirs: Callable
  masked: bool
  reference: str


def find_clone(kind: str, dirs: Sequence[Path]) -> Path | None:
  """The first of `dirs` that holds `kind`'s reference file, or None."""
  marker = CLONES[kind][0]
  return next((Path(d) for d in dirs if (Path(d) / marker).is_file()), None)


def check_clones(dirs: Sequence[Path]) -> None:
  """Every named folder must be a clone we know: a typo is an error, not a silently skipped case."""
  for d in dirs:
    if not any((Path(d) / marker).is_file() for marker, _ in CLONES.values()):
      known = "; ".join(f"{url} (holds {marker})" for marker, url in CLONES.values())
      raise errors.NotFound(f"--against {d}: expected a clone of one of {known}; clone it "
                            "(git clone URL) and pass its folder.")


def _load_file(name: str, path: Path, package: str | None = None) -> types.ModuleType:
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  if package:
    module.__package__ = package
  sys.modules[name] = module
  spec.loader.exec_module(module)
  return module


@functools.cache
def load_bid_latte(clone: Path) -> type:
  """`BidLatte` from the clone's models/modules/latte.py alone (the file imports only jax, flax
  and math; its package's __init__ and the trainer are never run)."""
  return _load_file("_lra_reference_latte", Path(clone) / CLONES["latte"][0]).BidLatte


@functools.cache
def load_s5(clone: Path) -> types.ModuleType:
  """lindermanlab/S5's `s5.ssm` (with the `s5.ssm_init` it imports), under a private package name
  so that no `s5` package of the user's is shadowed and s5/__init__.py is never run. Its
  annotations name jax.numpy.DeviceArray, gone from today's JAX: a stand-in exists only while
  the files load."""
  root = Path(clone) / "s5"
  package = types.ModuleType("_lra_reference_s5")
  package.__path__ = [str(root)]
  sys.modules[package.__name__] = package
  added = not hasattr(jnp, "DeviceArray")
  if added:
    jnp.DeviceArray = jax.Array
  try:
    for name in ("ssm_init", "ssm"):
      setattr(package, name, _load_file(f"{package.__name__}.{name}", root / f"{name}.py",
                                        package.__name__))
  finally:
    if added:
      del jnp.DeviceArray
  return package.ssm


# ---------------------------------------------------------------------------------------------
# Latte: our fused [D, H, 2 L/H + D/H] projection split into BidLatte's Wq, Wk [D, L] and Wv [D, D].

def latte_to_bid_latte(params: dict, num_heads: int, num_latents: int) -> dict:
  """Our LatteMixer's parameters -> BidLatte's. BidLatte splits L and D head-major (reshape to
  [..., H, -1]), as our per-head kernel is laid out, so each of its matrices is a slice."""
  kernel, out = params["qkv"]["kernel"], params["out"]["kernel"]     # [D,H,2l+Dh], [H,Dh,D]
  dim, per_head = kernel.shape[0], num_latents // num_heads
  flat = lambda part: part.reshape(dim, -1)  # noqa: E731 - [D,H,k] -> [D,H*k], head-major
  return {"Wq": flat(kernel[..., :per_head]), "Wk": flat(kernel[..., per_head:2 * per_head]),
          "Wv": flat(kernel[..., 2 * per_head:]), "o_proj": out.reshape(-1, out.shape[-1])}


def latte_pair(clone: Path, dim: int, num_heads: int, num_latents: int, max_len: int) -> Pair:
  ours = latte.LatteMixer(dim=dim, num_heads=num_heads, max_len=max_len, num_latents=num_latents)
  theirs = load_bid_latte(clone)(L=num_latents, n_heads=num_heads, hidden_dim=dim)
  return Pair(
      ours=lambda p, x, m: ours.apply({"params": p}, x, m, deterministic=True)[0],
      theirs=lambda p, x, m: theirs.apply({"params": p}, x, train=False,
                                          attention_mask=m.astype(x.dtype)),
      init=lambda key: _init(ours, key, dim),
      init_theirs=lambda key, x, m: theirs.init(key, x, train=False)["params"],
      to_theirs=functools.partial(latte_to_bid_latte, num_heads=num_heads,
                                  num_latents=num_latents),
      masked=True, reference="BidLatte (raresdolga/latte_transformer models/modules/latte.py)")


# ---------------------------------------------------------------------------------------------
# S5: the same names; S5SSM keeps log_step as [P, 1] and runs on one unbatched sequence.

def s5_to_s5ssm(params: dict) -> dict:
  """Our S5Mixer's parameters (activation "none": the bare SSM) -> S5SSM's (bidirectional,
  conj_sym, trunc_standard_normal or lecun_normal C: two C matrices C1, C2)."""
  return {**{k: params[k] for k in ("Lambda_re", "Lambda_im", "B", "C1", "C2", "D")},
          "log_step": params["log_step"][:, None]}


def s5_pair(clone: Path, dim: int, state_size: int, blocks: int, max_len: int) -> Pair:
  ours = s5.S5Mixer(dim=dim, num_heads=1, max_len=max_len, state_size=state_size, blocks=blocks,
                    activation="none")
  lam, v, v_inv = s5_init.block_diagonal_init(state_size, blocks)
  theirs = load_s5(clone).init_S5SSM(
      H=dim, P=state_size // 2, Lambda_re_init=lam.real, Lambda_im_init=lam.imag, V=v, Vinv=v_inv,
      C_init="trunc_standard_normal", discretization="zoh", dt_min=1e-3, dt_max=0.1,
      conj_sym=True, clip_eigs=False, bidirectional=True)()
  # S5's models map the layer over the batch (nn.vmap, parameters shared); jax.vmap is the same.
  # Its code relies on NumPy's rank promotion ([P] * [T,P]), which a caller may have disallowed.
  def run(p, x, m):
    with jax.numpy_rank_promotion("allow"):
      return jax.vmap(lambda seq: theirs.apply({"params": p}, seq))(x)

  def init_theirs(key, x, m):
    with jax.numpy_rank_promotion("allow"):
      return theirs.init(key, x[0])["params"]
  return Pair(
      ours=lambda p, x, m: ours.apply({"params": p}, x, m, deterministic=True)[0],
      theirs=run, init=lambda key: _init(ours, key, dim), init_theirs=init_theirs,
      to_theirs=s5_to_s5ssm, masked=False,
      reference="S5SSM, bidirectional (lindermanlab/S5 s5/ssm.py)")


# ---------------------------------------------------------------------------------------------
# Softmax: our fused [D, 3, H, Dh] projection split into Flax's query, key and value.

def softmax_to_flax(params: dict) -> dict:
  """Our SoftmaxMixer's parameters -> flax.linen.MultiHeadDotProductAttention's."""
  qkv = params["qkv"]
  split = {name: {"kernel": qkv["kernel"][:, i], "bias": qkv["bias"][i]}
           for i, name in enumerate(("query", "key", "value"))}
  return {**split, "out": params["out"]}


def _jax_attention(query, key, value, *, mask=None, **_):
  """Flax's attention_fn slot filled by jax.nn.dot_product_attention (inputs [B,T,H,Dh], mask
  [B,1,1,T]); the dropout arguments Flax passes are unused at rate 0."""
  return jax.nn.dot_product_attention(query, key, value, mask=mask)


SOFTMAX_REFERENCES = {
    "flax": ("flax.linen.MultiHeadDotProductAttention", nn.dot_product_attention),
    "jax": ("jax.nn.dot_product_attention (in Flax's MultiHeadDotProductAttention)",
            _jax_attention)}


def softmax_pair(which: str, dim: int, num_heads: int, max_len: int) -> Pair:
  # Our one-piece formula: what the runner computes on a CPU and in f32 anywhere ("auto").
  ours = softmax.SoftmaxMixer(dim=dim, num_heads=num_heads, max_len=max_len,
                              implementation="einsum")
  reference, attention_fn = SOFTMAX_REFERENCES[which]
  theirs = nn.MultiHeadDotProductAttention(num_heads=num_heads, qkv_features=dim, out_features=dim,
                                           attention_fn=attention_fn, deterministic=True)
  return Pair(
      ours=lambda p, x, m: ours.apply({"params": p}, x, m, deterministic=True)[0],
      theirs=lambda p, x, m: theirs.apply({"params": p}, x, mask=m[:, None, None, :]),
      init=lambda key: _init(ours, key, dim),
      init_theirs=lambda key, x, m: theirs.init(key, x)["params"],
      to_theirs=softmax_to_flax, masked=True,
      reference=reference)


def _init(module: nn.Module, key: jax.Array, dim: int) -> Any:
  x = jnp.zeros((1, 8, dim), jnp.float32)
  return module.init(key, x, jnp.ones((1, 8), bool), deterministic=True)["params"]
