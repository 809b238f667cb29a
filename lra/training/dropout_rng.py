"""Dropout keys whose random bits cost half: threefry2x32 blocks with both output words used.

JAX's partitionable threefry hashes one 64-bit counter per 32-bit draw and XORs the two output
words; dropout costs ~20% of a CPU training step (Latte, 4 layers, D=128, batch 32, T=2000) and
most of that is hashing. With paired bits the step takes 4.95 s instead of 5.46 s (`lra bench`
medians, three alternating pairs alone on 2 cores; results/bench/step_dropout_*.md).

With these keys each threefry2x32 block gives two draws, elements j and j + D/2 of the last axis
(D even): the same hash and key schedule, half the blocks. Counters are global element indices, so
the draws do not depend on how the batch is sharded over devices.

`rbg` and `unsafe_rbg` are JAX's keys over XLA's RngBitGenerator (MaxText and t5x draw dropout
from `unsafe_rbg`): the bits come from one generator call per mask instead of a hash per element.
Keys are still split and folded in as functions of (seed, step), so a resumed run draws the same
masks; but XLA promises those bits only for one backend and compiler version, and not across
shardings (a run resumed on other devices, or another jaxlib, draws other masks). `rbg` folds in
the step with threefry, `unsafe_rbg` with the generator itself (cheaper, weaker key mixing).
"""
from __future__ import annotations

import math

import jax
import jax.extend.random as jex_random
import jax.numpy as jnp
import numpy as np

from lra import errors

_THREEFRY = jex_random.threefry_prng_impl


def _random_bits(key: jax.Array, bit_width: int, shape: tuple[int, ...]) -> jax.Array:
  """uint32 draws of `shape` from blocks (0, i), i the row-major index in shape[:-1] + (D/2,)."""
  if bit_width != 32 or not shape or shape[-1] % 2 or math.prod(shape) // 2 >= 2**32:
    return _THREEFRY.random_bits(key, bit_width, shape)
  half = (*shape[:-1], shape[-1] // 2)
  strides = np.cumprod((1,) + half[:0:-1])[::-1]
  counter = sum(jax.lax.broadcasted_iota(jnp.uint32, half, axis) * jnp.uint32(stride)
                for axis, stride in enumerate(strides))
  first, second = jex_random.threefry2x32_p.bind(key[0], key[1], jnp.zeros_like(counter),
                                                 counter)
  return jnp.concatenate([first, second], axis=-1)


IMPL = jex_random.define_prng_impl(
    key_shape=_THREEFRY.key_shape, seed=_THREEFRY.seed, split=_THREEFRY.split,
    random_bits=_random_bits, fold_in=_THREEFRY.fold_in, name="threefry2x32_paired")


BITS = ("threefry", "paired", "rbg", "unsafe_rbg")


def key(seed: int, bits: str = "paired") -> jax.Array:
  """A PRNG key for dropout (initialisation always uses `jax.random.PRNGKey`).

  Args:
    seed: the dropout seed.
    bits: "threefry": JAX's default key (`jax.random.PRNGKey`), as every run before this option;
      "paired": the same threefry key data with the paired random bits; "rbg" / "unsafe_rbg":
      JAX's RngBitGenerator keys seeded with `seed`.
  Raises:
    ValueError: an unknown `bits`, naming the valid ones.
  """
  if bits == "threefry":
    return jax.random.PRNGKey(seed)
  if bits in ("rbg", "unsafe_rbg"):
    return jax.random.key(seed, impl=bits)
  if bits != "paired":
    raise errors.BadValue(f"train.dropout_bits must be one of {', '.join(BITS)}, got {bits!r}")
  return jax.random.wrap_key_data(jax.random.key_data(jax.random.key(seed, impl="threefry2x32")),
                                  impl=IMPL)
