"""Linear attention (Katharopoulos et al. 2020): softmax replaced by the kernel elu(x)+1.

x_t = phi(q_t)^T sum_s phi(k_s) v_s^T / phi(q_t)^T sum_s phi(k_s), sums over real tokens only.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra.models.mixers.projections import project_qkv


def linear_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
  """Kernelised attention with feature map elu(x)+1; padded keys leave both sums.

  Args:
    q, k: [B,T,H,Dh] queries and keys.
    v: [B,T,H,Dv] values.
    mask: [B,T] bool, True on real tokens.
  Returns:
    [B,T,H,Dv]; O(B T H Dh Dv) time, O(B H Dh Dv) extra memory.
  """
  phi_q = jax.nn.elu(q) + 1.0
  # Zeroing the pad features removes pads from the numerator and the normaliser at once.
  phi_k = jnp.where(mask[:, :, None, None], jax.nn.elu(k) + 1.0, 0.0)
  kv = jnp.einsum("bshd,bshe->bhde", phi_k, v)                      # [B,H,Dh,Dv]
  normaliser = jnp.einsum("bthd,bhd->bth", phi_q, jnp.sum(phi_k, axis=1))
  # elu+1 > 0, so only an all-pad sequence has a zero normaliser; keep it finite.
  normaliser = jnp.maximum(normaliser, jnp.finfo(phi_q.dtype).tiny)
  return jnp.einsum("bthd,bhde->bthe", phi_q, kv) / normaliser[..., None]


class LinearMixer(nn.Module):
  """Linear attention (Katharopoulos et al. 2020), feature map elu+1: O(T) time and memory."""
  dim: int
  num_heads: int
  max_len: int

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    head_dim = self.dim // self.num_heads
    q, k, v = project_qkv(x, self.num_heads, head_dim)
    y = linear_attention(q, k, v, mask)
    y = nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(y)
    return y, carry
