"""Performer (Choromanski et al. 2021): FAVOR+ positive orthogonal random features for softmax.

exp(q.k / sqrt(Dh)) ~= phi(q).phi(k) with phi(x) = exp(W x' - |x'|^2 / 2) / sqrt(L), x' = x Dh^-1/4,
W [L,Dh] orthogonal Gaussian rows. `kernel="relu"` is what the LRA code ran instead: phi(x) =
relu(x) + 1e-3 on the head dimensions, with no random features.
"""
from __future__ import annotations

import zlib

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import errors
from lra.models.mixers.projections import project_qkv

RELU_EPSILON = 1e-3  # the LRA code's kernel_epsilon, keeps every relu feature positive


def orthogonal_features(key: jax.Array, num_features: int, dim: int) -> jax.Array:
  """[L,Dh] Gaussian rows, orthogonal within each block of Dh, with chi-distributed norms.

  Each block's directions are the rows of a Haar-random orthogonal matrix, so every row is
  uniform on the sphere and the FAVOR+ estimate of exp(q.k) is unbiased for any L.
  """
  num_blocks = -(-num_features // dim)
  block_key, norm_key = jax.random.split(key)
  q, r = jnp.linalg.qr(jax.random.normal(block_key, (num_blocks, dim, dim)))
  # Householder QR picks the signs of diag(R) from the input, so column i of Q leans towards
  # +-e_i (mean |coordinate| ~0.25 at Dh=8) and the estimate stays biased however large L is.
  # Flipping columns so that diag(R) > 0 gives the unique QR, whose Q is Haar-distributed
  # (Mezzadri 2007, "How to generate random matrices from the classical compact groups").
  q = q * jnp.where(jnp.diagonal(r, axis1=1, axis2=2) < 0, -1.0, 1.0)[:, None, :]
  # Columns of Q are orthonormal, so the rows of each Q^T are too.
  directions = jnp.swapaxes(q, 1, 2).reshape(num_blocks * dim, dim)[:num_features]
  # Rescaling unit rows by norms of Gaussian vectors keeps each row marginally N(0, I).
  norms = jnp.linalg.norm(jax.random.normal(norm_key, (num_features, dim)), axis=1)
  return directions * norms[:, None]


def _softmax_features(x: jax.Array, features: jax.Array, stabiliser_axes: tuple[int, ...],
                      valid: jax.Array) -> jax.Array:
  """Positive random features of x [B,T,H,Dh] -> [B,T,H,L], times a constant that cancels."""
  x = x * x.shape[-1] ** -0.25
  logits = jnp.einsum("bthd,ld->bthl", x, features) - 0.5 * jnp.sum(x * x, -1, keepdims=True)
  # exp(logits - max) cannot overflow; the max is shared by all terms of each ratio, so it
  # cancels (taken over real positions only, so a huge pad cannot underflow the real features).
  shift = jnp.max(jnp.where(valid, logits, -jnp.inf), axis=stabiliser_axes, keepdims=True)
  shift = jax.lax.stop_gradient(jnp.where(jnp.isfinite(shift), shift, 0.0))
  return jnp.exp(logits - shift) * features.shape[0] ** -0.5


def performer_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                        features: jax.Array | None, kernel: str = "softmax") -> jax.Array:
  """FAVOR+ attention with padded keys removed from the numerator and the normaliser.

  Args:
    q, k: [B,T,H,Dh] queries and keys.
    v: [B,T,H,Dv] values.
    mask: [B,T] bool, True on real tokens.
    features: [L,Dh] random projection for kernel="softmax" (see `orthogonal_features`);
      ignored (may be None) for kernel="relu".
    kernel: "softmax" (unbiased estimate of softmax attention) or "relu" (the LRA code's kernel).
  Returns:
    [B,T,H,Dv]; O(B T H L Dv) time and O(B T H L) memory.
  """
  real = mask[:, :, None, None]
  if kernel == "softmax":
    phi_q = _softmax_features(q, features, (-1,), jnp.ones_like(real))
    phi_k = _softmax_features(k, features, (1, 3), real)
  elif kernel == "relu":
    phi_q, phi_k = jax.nn.relu(q) + RELU_EPSILON, jax.nn.relu(k) + RELU_EPSILON
  else:
    raise errors.BadValue(f"performer: kernel must be 'softmax' or 'relu', got {kernel!r}")
  phi_k = jnp.where(real, phi_k, 0.0)
  kv = jnp.einsum("bshl,bshe->bhle", phi_k, v)                      # [B,H,L,Dv]
  normaliser = jnp.einsum("bthl,bhl->bth", phi_q, jnp.sum(phi_k, axis=1))
  normaliser = jnp.maximum(normaliser, jnp.finfo(phi_q.dtype).tiny)  # all-pad rows stay finite
  return jnp.einsum("bthl,bhle->bthe", phi_q, kv) / normaliser[..., None]


class PerformerMixer(nn.Module):
  """Performer (Choromanski et al. 2021): FAVOR+ random-feature softmax, O(T L) time and memory.

  Attributes:
    num_features: L, random features per head (kernel="softmax").
    kernel: "softmax" (FAVOR+) or "relu" (deterministic relu features, as the LRA code ran).
    redraw: draw fresh features at every training step from the 'dropout' rng; evaluation
      always uses the fixed features.
    seed: the fixed features are drawn from this seed folded with the layer's name, so they are
      reproducible without being stored in the checkpoint.
    output_dtype: "input" (the kernel's float32 output cast back to x's dtype before the output
      projection) or "float32" (kept: what bfloat16 runs computed before the cast existed).
  """
  dim: int
  num_heads: int
  max_len: int
  num_features: int = 256
  kernel: str = "softmax"
  redraw: bool = False
  seed: int = 0
  output_dtype: str = "input"

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    head_dim = self.dim // self.num_heads
    q, k, v = project_qkv(x, self.num_heads, head_dim)
    features = None
    if self.kernel == "softmax":
      if self.redraw and not deterministic:
        key = self.make_rng("dropout")
      else:
        layer = zlib.crc32("/".join(self.scope.path).encode())
        key = jax.random.fold_in(jax.random.PRNGKey(self.seed), layer)
      features = orthogonal_features(key, self.num_features, head_dim)
    # The random features stay float32 under bfloat16 (exp of a sum of head_dim products is where
    # 8 bits of mantissa hurt), so the kernel computes in float32; back to x's dtype after it.
    if self.output_dtype not in ("input", "float32"):
      raise errors.BadValue(f"performer: output_dtype must be 'input' or 'float32', got "
                            f"{self.output_dtype!r}")
    y = performer_attention(q, k, v, mask, features, self.kernel)
    y = y.astype(x.dtype) if self.output_dtype == "input" else y
    y = nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(y)
    return y, carry
