"""Synthesizer (Tay et al. 2021) as LRA ran it: learned [T,T] attention logits per head, here
added to dot-product attention's (the paper's "Random + Vanilla").

y_t = sum_s softmax_s(S[t,s] + q_t k_s / sqrt(Dh)) v_s over the real s. S is synthesised without
token-token interaction: `random`, one learned matrix R per head, S = R[:T,:T]; `factorized_random`,
R = R1 R2 of rank k; `dense`, S[t,:] = W2 ReLU(W1 x_t)[:T] from token t alone. Each is indexed by
absolute positions up to a fixed maximum length, so a sequence longer than it cannot run; pads
come after the real tokens and are left out of the softmax, so S's real rows and columns, and the
outputs, do not depend on how many pads follow.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import errors
from lra.models.mixers.projections import project_qkv
from lra.models.mixers.softmax import einsum_path, softmax_attention

MODES = ("random", "factorized_random", "dense")


def synthesizer_attention(v: jax.Array, mask: jax.Array, synthetic: jax.Array,
                          q: jax.Array | None = None, k: jax.Array | None = None, *,
                          query_chunk: int = 0) -> jax.Array:
  """Softmax over real keys of synthetic logits, plus the dot product's when q, k are given.

  Args:
    v: [B,T,H,Dv] values.
    mask: [B,T] bool, True on real tokens.
    synthetic: [B,H,T,T] or [1,H,T,T] logits S[t,s].
    q, k: [B,T,H,Dh] queries and keys, or None (synthetic logits alone).
    query_chunk: queries per chunk (0: all at once), as softmax attention's: the same values, the
      [B,H,T,T] weights never whole (on a CPU several times faster at 2,000 tokens).
  Returns:
    [B,T,H,Dv]; O(B H T^2 (Dh + Dv)) time, as softmax attention.
  """
  if q is None:
    # Synthetic logits alone are softmax attention's with a zero dot product: one channel of zeros
    # costs a T x T pass, where a second implementation of the chunked softmax would cost a copy.
    q = k = jnp.zeros((*v.shape[:-1], 1), v.dtype)
  return softmax_attention(q, k, v, mask, bias=synthetic, query_chunk=query_chunk)


class SynthesizerMixer(nn.Module):
  """Synthesizer (Tay et al. 2021), Random + dot product as LRA ran it: O(T^2), like softmax.

  Attributes:
    mode: random (LRA code) | factorized_random | dense: how the [T,T] logits are synthesised.
    rank: k of factorized_random (LRA code: 32, unused by its runs).
    dot_product: add dot-product attention's logits (LRA code: `ignore_dot_product=False`).
    max_length: the longest sequence the synthetic logits cover; 0 takes the model's max_len (the
      task's length, CLS included), as the LRA code does.
    query_chunk: queries per chunk (0: all at once); how it computes, not what (see
      `synthesizer_attention`).
  """
  # Read by the contract's memory check (models/mixers/contract.py).
  QUADRATIC = "its synthetic logits, and the dot product's, are [T, T] per head"

  dim: int
  num_heads: int
  max_len: int
  mode: str = "random"
  rank: int = 32
  dot_product: bool = True
  max_length: int = 0
  query_chunk: int = 0

  @classmethod
  def execution_path(cls, settings: dict, dtype: str, head_dim: int | None = None) -> str:
    """For run records: "einsum (one piece)" or "einsum (query chunks of 128)"."""
    del dtype, head_dim  # one implementation on every backend
    return einsum_path(settings)

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    length, cover = x.shape[1], self.max_length or self.max_len
    if self.mode not in MODES:
      raise errors.BadValue(f"synthesizer: mode must be one of {', '.join(MODES)}; found "
                            f"{self.mode!r}. Set --config.mixers.synthesizer.mode.")
    if length > cover:
      raise errors.BadValue(f"synthesizer: its logits cover {cover} positions and the input has "
                            f"{length}; set --config.mixers.synthesizer.max_length={length} (or 0: "
                            "the model's max_len).")
    head_dim = self.dim // self.num_heads
    if self.dot_product:
      q, k, v = project_qkv(x, self.num_heads, head_dim)
    else:
      q = k = None
      v = nn.DenseGeneral((self.num_heads, head_dim), name="value")(x)
    init, h = nn.initializers.xavier_uniform(), self.num_heads
    if self.mode == "random":
      synthetic = self.param("random", init, (h, cover, cover))[None, :, :length, :length]
    elif self.mode == "factorized_random":
      r1 = self.param("random1", init, (h, cover, self.rank))[:, :length]
      r2 = self.param("random2", init, (h, self.rank, cover))[:, :, :length]
      synthetic = jnp.einsum("htk,hks->hts", r1, r2)[None]
    else:
      hidden = nn.relu(nn.DenseGeneral((h, head_dim), name="dense_syn")(x))
      scores = nn.Dense(cover, name="dense_syn_len")(hidden)[..., :length]    # [B,T,H,T]
      synthetic = jnp.swapaxes(scores, 1, 2)
    y = synthesizer_attention(v, mask, synthetic.astype(v.dtype), q, k,
                              query_chunk=self.query_chunk)
    return nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(y), carry
