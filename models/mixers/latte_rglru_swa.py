"""Latte-RGLRU-SWA (Dolga et al., ICLR version), bidirectional: Latte Macchiato's local window
state plus Latte states whose probabilities read y = RG-LRU(x). Linear in T.
"""
from __future__ import annotations

import flax.linen as nn
import jax

from lra import errors
from lra.models.mixers.rope import rotate_queries_and_keys
from lra.models.mixers.latte_macchiato import latte_macchiato_attention
from lra.models.mixers.latte_rglru import LatentFeatures
from lra.models.mixers.projections import project_qkv


class LatteRGLRUSWAMixer(nn.Module):
  """Latte-RGLRU-SWA: local window softmax + RG-LRU-conditioned Latte states, O(T (w + L)).

  p(s|t) = p(0|t) p_local(s|t) + sum_l p(l|t) p(s|l), as in latte_macchiato, with p(l|t) over
  the L+1 states and p(s|l) computed from y = BiRGLRU(x) (no convolution, as in latte_rglru).
  Ours, not the paper's: the window is symmetric, |t - s| <= w/2 (the paper's is causal, see
  latte_macchiato). Choices where the paper is open (switchable): the window's queries, keys and
  the shared values come from x; `rope=True` rotates the window's queries and keys by position
  (RoPE, fixed frequencies), which the paper uses for the text tasks, while image tasks rely on
  the encoder's absolute positions; `combine` as in latte_rglru.
  """
  dim: int
  num_heads: int
  max_len: int
  num_latents: int = 40
  window: int = 128
  rope: bool = False
  combine: str = "sum"

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    if self.num_latents % self.num_heads:
      raise errors.BadValue(f"latte_rglru_swa: num_latents={self.num_latents} must be a multiple "
                            f"of num_heads={self.num_heads} (latents are split across heads).")
    per_head = self.num_latents // self.num_heads
    head_dim = self.dim // self.num_heads
    q, k, v = project_qkv(x, self.num_heads, head_dim)
    if self.rope:
      q, k = rotate_queries_and_keys(q, k, "latte_rglru_swa")
    y = LatentFeatures("rglru", combine=self.combine, name="latent_features")(x, mask)
    state_logits = nn.DenseGeneral((self.num_heads, per_head + 1), name="state_logits")(y)
    latent_k = nn.DenseGeneral((self.num_heads, per_head), name="key_latents")(y)
    out = latte_macchiato_attention(q, k, v, state_logits, latent_k, mask, self.window)
    return nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(out), carry
