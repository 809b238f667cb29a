"""The one bidirectional encoder every mixer plugs into, and the classifier heads on top of it.

tokens -> embedding + positions -> N pre-LN blocks [x + Drop(Mixer(LN x)); x + Drop(MLP(LN x))]
(or the Latte paper's "++" blocks, see EncoderBlock) -> LN -> masked mean (or CLS) pooling -> MLP classifier. Retrieval encodes both documents with the
same weights and classifies [u, v, u*v, u-v].
"""
from __future__ import annotations

from typing import Callable, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

# A mixer class with its own settings bound (functools.partial), called with the encoder's sizes:
# mixer_factory(dim=D, num_heads=H, max_len=T, name=...). The encoder never looks mixers up by name.
MixerFactory = Callable[..., nn.Module]


def sinusoidal_positions(length: int, dim: int) -> np.ndarray:
  """[T,D] fixed sin/cos position encodings (Vaswani et al.)."""
  position = np.arange(length)[:, None]
  frequency = np.exp(-np.log(10000.0) * np.arange(0, dim, 2) / dim)
  table = np.zeros((length, dim), dtype=np.float32)
  table[:, 0::2] = np.sin(position * frequency)
  table[:, 1::2] = np.cos(position * frequency)[:, : dim // 2]
  return table


class MlpBlock(nn.Module):
  """Position-wise feed-forward: Dense(mlp_dim) -> GELU -> Dropout -> Dense(D)."""
  mlp_dim: int
  dropout_rate: float

  @nn.compact
  def __call__(self, x: jax.Array, *, deterministic: bool) -> jax.Array:
    y = nn.gelu(nn.Dense(self.mlp_dim)(x))
    y = nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)
    return nn.Dense(x.shape[-1])(y)


class GatedMlpBlock(nn.Module):
  """GeGLU feed-forward: Dense(D)(GELU(Dense(mlp_dim) x) * Dense(mlp_dim) x), with dropout."""
  mlp_dim: int
  dropout_rate: float

  @nn.compact
  def __call__(self, x: jax.Array, *, deterministic: bool) -> jax.Array:
    y = nn.gelu(nn.Dense(self.mlp_dim, name="gate")(x)) * nn.Dense(self.mlp_dim, name="up")(x)
    y = nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)
    return nn.Dense(x.shape[-1], name="down")(y)


class EncoderBlock(nn.Module):
  """Residual block around the mixer and the MLP: pre-LayerNorm, or the Latte paper's "++" block.

  block="prenorm": x + Drop(Mixer(LN x)), then x + Drop(MLP(LN x)) with a GELU MLP.
  block="plusplus" (Latte++, the ICLR version's improved block, in the Griffin style): with
  h = RMSNorm(x), x + Drop(Dense(GELU(Dense h) * Mixer(h))) -- the mixer output is gated by a
  GELU branch and projected -- then x + Drop(GeGLU(RMSNorm x)). Our reading of the paper's
  figure (it gives no equations): RMSNorm instead of LayerNorm, a D x D gate and a D x D output
  projection around the mixer, and a gated MLP of the same mlp_dim. Per block that adds
  2 D^2 + D mlp_dim weights, +60% over a prenorm block at mlp_dim = 4D with a 2 D^2 mixer. The
  paper reports 111M (Latte) vs 140M (Latte++) at the LM scale without the split, so the counts
  need not match; the budget can be matched by lowering model.mlp_dim.
  """
  mixer_factory: MixerFactory
  num_heads: int
  mlp_dim: int
  dropout_rate: float
  max_len: int
  block: str = "prenorm"

  @nn.compact
  def __call__(self, x, mask, carry, deterministic: bool):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry). `deterministic` is positional for nn.remat."""
    mixer = self.mixer_factory(dim=x.shape[-1], num_heads=self.num_heads, max_len=self.max_len,
                               name="mixer")
    if self.block == "plusplus":
      h = nn.RMSNorm(name="mixer_norm")(x)
      y, carry = mixer(h, mask, deterministic=deterministic, carry=carry)
      y = nn.gelu(nn.Dense(x.shape[-1], name="mixer_gate")(h)) * y
      y = nn.Dense(x.shape[-1], name="mixer_out")(y)
      x = x + nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)
      y = GatedMlpBlock(self.mlp_dim, self.dropout_rate, name="mlp")(
          nn.RMSNorm(name="mlp_norm")(x), deterministic=deterministic)
      return x + nn.Dropout(self.dropout_rate)(y, deterministic=deterministic), carry
    if self.block != "prenorm":
      raise ValueError(f"model.block must be 'prenorm' or 'plusplus', got {self.block!r} "
                       f"(--config.model.block=plusplus).")
    y, carry = mixer(nn.LayerNorm()(x), mask, deterministic=deterministic, carry=carry)
    x = x + nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)
    y = MlpBlock(self.mlp_dim, self.dropout_rate)(nn.LayerNorm()(x), deterministic=deterministic)
    return x + nn.Dropout(self.dropout_rate)(y, deterministic=deterministic), carry


class Encoder(nn.Module):
  """Embeds tokens[B,T] and returns pooled features [B,D].

  Attributes:
    embedding: "token" (a learned vector per id) or "dense" (pixel id v -> v/127.5 - 1 -> Dense),
      the S5/Latte dense variant for pixel tasks.
    pos_encoding: "sinusoidal" or "learned".
    pooling: "mean" (over real tokens) or "cls" (a learned token prepended).
    dtype: compute dtype of the blocks ("float32" or "bfloat16"). Parameters stay float32: the
      blocks read bf16 copies of them, so gradients and optimizer state are float32. Embedding,
      final norm, pooling and the head run in float32.
    remat: recompute each block's activations in the backward pass (memory for compute).
    block: "prenorm" or "plusplus" (the Latte paper's "++" block; see EncoderBlock).
  """
  vocab_size: int
  max_len: int
  dim: int
  num_layers: int
  num_heads: int
  mlp_dim: int
  dropout_rate: float
  mixer_factory: MixerFactory
  embedding: str = "token"
  pos_encoding: str = "sinusoidal"
  pooling: str = "mean"
  dtype: str = "float32"
  remat: bool = False
  block: str = "prenorm"

  def _block_class(self):
    """EncoderBlock wrapped for remat and the compute dtype; the mixers need not know either."""
    block = nn.remat(EncoderBlock, static_argnums=(4,)) if self.remat else EncoderBlock
    dtype = jnp.dtype(self.dtype)
    # At init the parameters are created in float32 by the plain block (same names, same tree).
    if dtype == jnp.float32 or self.is_initializing():
      return block
    cast = lambda tree: jax.tree.map(  # noqa: E731
        lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a, tree)
    return nn.map_variables(block, "params", trans_in_fn=cast)

  @nn.compact
  def __call__(self, tokens: jax.Array, mask: jax.Array, *, deterministic: bool) -> jax.Array:
    if self.embedding == "token":
      x = nn.Embed(self.vocab_size, self.dim, name="embed")(tokens)
    elif self.embedding == "dense":
      x = nn.Dense(self.dim, name="embed")((tokens.astype(jnp.float32) / 127.5 - 1.0)[..., None])
    else:
      raise ValueError(f"model.embedding must be 'token' or 'dense', got {self.embedding!r}")
    if self.pooling == "cls":
      cls = self.param("cls", nn.initializers.normal(0.02), (1, 1, self.dim))
      x = jnp.concatenate([jnp.broadcast_to(cls, (x.shape[0], 1, self.dim)), x], axis=1)
      mask = jnp.concatenate([jnp.ones_like(mask[:, :1]), mask], axis=1)
    elif self.pooling != "mean":
      raise ValueError(f"model.pooling must be 'mean' or 'cls', got {self.pooling!r}")
    length = x.shape[1]
    if self.pos_encoding == "sinusoidal":
      x = x + jnp.asarray(sinusoidal_positions(length, self.dim))[None]
    elif self.pos_encoding == "learned":
      x = x + nn.Embed(self.max_len + 1, self.dim, name="positions")(jnp.arange(length))[None]
    else:
      raise ValueError(f"model.pos_encoding must be 'sinusoidal' or 'learned', got "
                       f"{self.pos_encoding!r}")
    x = nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)
    x = x.astype(self.dtype)
    carry = None
    block = self._block_class()
    # The mixers see the CLS token too, so their longest input is max_len + 1 (Linformer's
    # projections have one row per position).
    mixer_max_len = self.max_len + (self.pooling == "cls")
    for i in range(self.num_layers):
      x, carry = block(self.mixer_factory, self.num_heads, self.mlp_dim,
                       self.dropout_rate, mixer_max_len, self.block, name=f"block_{i}")(
                           x, mask, carry, deterministic)
    x = nn.LayerNorm(name="final_norm")(x.astype(jnp.float32))
    if self.pooling == "cls":
      return x[:, 0]
    weights = mask.astype(x.dtype)[..., None]
    return jnp.sum(x * weights, axis=1) / jnp.maximum(jnp.sum(weights, axis=1), 1.0)


class Classifier(nn.Module):
  """Encoder + MLP head. Called on a batch dict; returns logits [B,C].

  A single-sequence batch has inputs/mask [B,T]; a dual one (Retrieval) has inputs1/mask1 and
  inputs2/mask2, encoded by the same weights.
  """
  encoder: Encoder
  num_classes: int
  dual: bool = False

  @nn.compact
  def __call__(self, batch: Mapping[str, jax.Array], *, deterministic: bool) -> jax.Array:
    if self.dual:
      u = self.encoder(batch["inputs1"], batch["mask1"], deterministic=deterministic)
      v = self.encoder(batch["inputs2"], batch["mask2"], deterministic=deterministic)
      features = jnp.concatenate([u, v, u * v, u - v], axis=-1)
    else:
      features = self.encoder(batch["inputs"], batch["mask"], deterministic=deterministic)
    hidden = nn.gelu(nn.Dense(self.encoder.dim, name="head_hidden")(features))
    return nn.Dense(self.num_classes, name="head_out")(hidden)
