"""Rotary positions (RoPE, Su et al. 2021): queries and keys rotated by their absolute position, so
a query-key product depends on the two positions only through their difference i - j. Latte's
VAPOR rotates values with the same pieces."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from lra import errors


def rope_frequencies(num_pairs: int, base: float = 10000.0) -> jax.Array:
  """[Dh/2] RoPE angles per position, base^(-i / (Dh/2)) (Su et al.)."""
  return base ** (-jnp.arange(num_pairs, dtype=jnp.float32) / num_pairs)


def rotate_pairs(x: jax.Array, angles: jax.Array) -> jax.Array:
  """Rotates channel pairs (i, i + Dh/2) of x[..., Dh] by angles[..., Dh/2] of the same rank."""
  first, second = jnp.split(x, 2, axis=-1)
  cos, sin = jnp.cos(angles).astype(x.dtype), jnp.sin(angles).astype(x.dtype)
  return jnp.concatenate([first * cos - second * sin, first * sin + second * cos], axis=-1)


def rotate_queries_and_keys(q: jax.Array, k: jax.Array, mixer: str
                            ) -> tuple[jax.Array, jax.Array]:
  """q, k [B,T,H,Dh] rotated by position t = 0..T-1 (every head alike, base 10,000, all Dh/2
  channel pairs, as the SPT paper's code does). Positions are absolute indices, so trailing pads
  move no real token. `mixer` names the setting in the error for an odd head dim."""
  head_dim = q.shape[-1]
  if head_dim % 2:
    raise errors.BadValue(f"{mixer}: rope=True needs an even dim/num_heads, got {head_dim}. Set "
                          f"--config.mixers.{mixer}.rope=False.")
  angles = (jnp.arange(q.shape[1], dtype=jnp.float32)[:, None, None]
            * rope_frequencies(head_dim // 2)[None, None])[None]           # [1,T,1,Dh/2]
  return rotate_pairs(q, angles), rotate_pairs(k, angles)
