"""The one bidirectional encoder every mixer plugs into, and the classifier heads on top of it.

tokens -> embedding + positions -> N pre-LN blocks [x + Drop(Mixer(LN x)); x + Drop(MLP(LN x))]
-> LN -> masked mean (or CLS) pooling -> MLP classifier. Retrieval encodes both documents with the
same weights and classifies [u, v, u*v, u-v].
"""
from __future__ import annotations

from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from models.mixers import get_mixer


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


class EncoderBlock(nn.Module):
  """Pre-LayerNorm residual block around the mixer and the MLP."""
  mixer: str
  mixer_config: Mapping[str, Any]
  num_heads: int
  mlp_dim: int
  dropout_rate: float
  max_len: int

  @nn.compact
  def __call__(self, x, mask, carry, *, deterministic: bool):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    mixer = get_mixer(self.mixer)(dim=x.shape[-1], num_heads=self.num_heads,
                                  dropout_rate=self.dropout_rate, max_len=self.max_len,
                                  **self.mixer_config, name="mixer")
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
  """
  vocab_size: int
  max_len: int
  dim: int
  num_layers: int
  num_heads: int
  mlp_dim: int
  dropout_rate: float
  mixer: str
  mixer_config: Mapping[str, Any]
  embedding: str = "token"
  pos_encoding: str = "sinusoidal"
  pooling: str = "mean"

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
    carry = None
    # The mixers see the CLS token too, so their longest input is max_len + 1 (Linformer's
    # projections have one row per position).
    mixer_max_len = self.max_len + (self.pooling == "cls")
    for i in range(self.num_layers):
      x, carry = EncoderBlock(self.mixer, self.mixer_config, self.num_heads, self.mlp_dim,
                              self.dropout_rate, mixer_max_len, name=f"block_{i}")(
                                  x, mask, carry, deterministic=deterministic)
    x = nn.LayerNorm(name="final_norm")(x)
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
