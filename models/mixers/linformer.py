"""Linformer (Wang et al. 2020): keys and values projected along time to L rows, then softmax.

K' = E^T K, V' = F^T V with learned E, F [max_len, L]; every query attends to the L projected rows.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import errors
from lra.models.mixers.projections import project_qkv
from lra.models.mixers.softmax import softmax_attention


def linformer_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                        e: jax.Array, f: jax.Array) -> jax.Array:
  """Softmax attention over length-projected keys and values; pads are zeroed before projecting.

  Args:
    q, k: [B,T,H,Dh] queries and keys.
    v: [B,T,H,Dv] values.
    mask: [B,T] bool, True on real tokens.
    e, f: [T,H,L] projections of the keys and of the values along time.
  Returns:
    [B,T,H,Dv]; O(B T H L Dh) time and memory.
  """
  real = mask[:, :, None, None]
  k_proj = jnp.einsum("bthd,thl->blhd", jnp.where(real, k, 0.0), e)   # [B,L,H,Dh]
  v_proj = jnp.einsum("bthd,thl->blhd", jnp.where(real, v, 0.0), f)   # [B,L,H,Dv]
  return softmax_attention(q, k_proj, v_proj, jnp.ones(k_proj.shape[:2], bool))


class LinformerMixer(nn.Module):
  """Linformer (Wang et al. 2020): keys/values projected to L rows along time, O(T L).

  Attributes:
    proj_len: L, the projected length (paper 256; the LRA code used 16, shared E=F across heads).
    share_kv: one projection for keys and values (E = F).
    share_heads: one projection for all heads.
  The projections have max_len rows (the task's sequence length); longer inputs are an error.
  """
  dim: int
  num_heads: int
  max_len: int
  proj_len: int = 256
  share_kv: bool = False
  share_heads: bool = False

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    length = x.shape[1]
    if length > self.max_len:
      raise errors.BadValue(
          f"linformer: input length T={length} exceeds max_len={self.max_len}, the number of rows "
          f"of its learned length projections. Build the model with max_len >= {length} (it is "
          f"the task's seq_len; re-prepare the data with a longer sequence length if needed).")
    head_dim = self.dim // self.num_heads
    q, k, v = project_qkv(x, self.num_heads, head_dim)
    heads = 1 if self.share_heads else self.num_heads
    # fan-in = max_len (the time axis being summed), as a Dense layer over time would have.
    init = nn.initializers.variance_scaling(1.0, "fan_in", "normal", in_axis=0, out_axis=2,
                                           batch_axis=1)
    shape = (self.max_len, heads, self.proj_len)
    e = self.param("e", init, shape)
    f = e if self.share_kv else self.param("f", init, shape)
    e, f = (jnp.broadcast_to(p[:length], (length, self.num_heads, self.proj_len)) for p in (e, f))
    y = linformer_attention(q, k, v, mask, e, f)
    y = nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(y)
    return y, carry
