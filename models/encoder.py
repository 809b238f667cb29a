"""The one bidirectional encoder every mixer plugs into, and the classifier heads on top of it.

tokens -> embedding + positions -> N pre-LN blocks [x + Drop(Mixer(LN x)); x + Drop(MLP(LN x))]
(or the Latte paper's "++" blocks, see EncoderBlock) -> [final norm] -> masked mean (or CLS, or
last real token) pooling -> MLP (or linear) classifier. Retrieval encodes both documents with the
same weights and classifies [u, v, u*v, u-v].
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra import errors

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


def image_patches(tokens: jax.Array, patch: int) -> jax.Array:
  """[B, S*S] row-major pixels -> [B, (S/p)^2, p*p]: each p x p square one row, squares row-major.

  Raises ValueError when T is not a square S*S with S divisible by p (ListOps, Text, Retrieval).
  """
  length = tokens.shape[1]
  side = int(round(length ** 0.5))
  if side * side != length or side % patch:
    raise errors.BadValue(f"model.patch={patch} needs a square image whose side divides by "
                          f"{patch}, but the task's sequences have {length} tokens; use "
                          "model.patch=1 here")
  grid = side // patch
  squares = tokens.reshape(tokens.shape[0], grid, patch, grid, patch).swapaxes(2, 3)
  return squares.reshape(tokens.shape[0], grid * grid, patch * patch)


def token_mask(mask: jax.Array, patch: int) -> jax.Array:
  """mask[B,T] of pixels or tokens -> [B,T'] of the encoder's tokens (T' = T / patch^2): a
  square is real if all its pixels are."""
  return mask if patch == 1 else jnp.all(image_patches(mask, patch), axis=-1)


def token_values(tokens: jax.Array, patch: int) -> jax.Array:
  """tokens[B,T] -> [B,T',P]: the P = patch^2 ids (pixel values) each encoder token is made of."""
  return tokens[..., None] if patch == 1 else image_patches(tokens, patch)


class MlpBlock(nn.Module):
  """Position-wise feed-forward: Dense(mlp_dim) -> GELU -> [Dropout] -> Dense(D).

  hidden_dropout: drop the hidden activations too (ours; the authors' code drops only the block's
  output, which the encoder block does for us).
  """
  mlp_dim: int
  dropout_rate: float
  hidden_dropout: bool = True

  @nn.compact
  def __call__(self, x: jax.Array, *, deterministic: bool) -> jax.Array:
    y = nn.gelu(nn.Dense(self.mlp_dim)(x))
    if self.hidden_dropout:
      y = nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)
    return nn.Dense(x.shape[-1])(y)


GLU_ACTIVATIONS = {"sigmoid": nn.sigmoid, "gelu": nn.gelu}


class GatedMlpBlock(nn.Module):
  """Gated feed-forward: Dense(D)(act(Dense(mlp_dim) x) * Dense(mlp_dim) x), [Dropout] inside.

  activation: "sigmoid" is the GLU (Dauphin et al. 2017), "gelu" the GeGLU (Shazeer 2020).
  """
  mlp_dim: int
  dropout_rate: float
  activation: str = "sigmoid"
  hidden_dropout: bool = True

  @nn.compact
  def __call__(self, x: jax.Array, *, deterministic: bool) -> jax.Array:
    if self.activation not in GLU_ACTIVATIONS:
      raise errors.BadValue(f"model.glu must be one of {sorted(GLU_ACTIVATIONS)}, got "
                            f"{self.activation!r}")
    gate = GLU_ACTIVATIONS[self.activation](nn.Dense(self.mlp_dim, name="gate")(x))
    y = gate * nn.Dense(self.mlp_dim, name="up")(x)
    if self.hidden_dropout:
      y = nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)
    return nn.Dense(x.shape[-1], name="down")(y)


BLOCKS = ("prenorm", "plusplus", "s5", "mega", "mega_prenorm")
NORMS = ("block", "batch")


def make_norm(norm: str, block: str, momentum: float, deterministic: bool, name: str):
  """The block's normalisation: its own ("block": LayerNorm, RMSNorm under "plusplus") or
  BatchNorm over batch and time, pads included, running averages when deterministic (S5's LRA
  runs; the statistics live in the "batch_stats" collection)."""
  if norm == "batch":
    return nn.BatchNorm(use_running_average=deterministic, momentum=momentum, name=name)
  if norm != "block":
    raise errors.BadValue(f"model.norm must be one of {NORMS}, got {norm!r} "
                          "(--config.model.norm=batch).")
  return (nn.RMSNorm if block == "plusplus" else nn.LayerNorm)(name=name)
S5_GATES = ("half_glu1", "half_glu2")
# The "s5" block's dropout: "elementwise" (a mask per element, and dropout after the embedding, as
# every block here) or "s5" (S5's SequenceLayer: nn.Dropout(broadcast_dims=[0]) on each [T,D]
# sequence, one mask per example and feature shared by every position, and none after its encoder).
S5_DROPOUTS = ("elementwise", "s5")


def _takes_residual(mixer: nn.Module) -> bool:
  """Whether the mixer's call takes `residual` (the input its gated update moves from)."""
  return "residual" in inspect.signature(type(mixer).__call__).parameters


class EncoderBlock(nn.Module):
  """Residual block around the mixer and the MLP: pre-LayerNorm, or the Latte paper's "++" block.

  block="prenorm": x + Drop(Mixer(LN x)), then x + Drop(MLP(LN x)) with a GELU MLP.
  block="plusplus" (Latte++, the paper's ICLR version: RMSNorm and a GLU feed-forward):
  x + Drop(Mixer(RMSNorm x)), then x + Drop(GLU(RMSNorm x)) with `glu` as the gate's activation.
  Ours, off by default, in the two blocks above: `mixer_gate` gates the mixer's output
  Griffin-style, Dense(GELU(Dense h) * Mixer(h)) with h the normed input (2 D^2 + 2 D weights).

  The published blocks of two LRA rows (docs/protocol.md), for their presets:
  block="s5" (S5's layer, prenorm, no MLP): y = Mixer(LN x), z = Drop(GELU y), then a gated dense
  layer, `s5_gate` "half_glu1": z * sigmoid(W z) or "half_glu2": y * sigmoid(W z); x + Drop(.).
  block="mega" (Mega's layer, post-norm, as on ListOps, Text, Retrieval): x = LN(x + Drop(Mixer
  x)), then x = LN(x + Drop(W2 SiLU(W1 x))); "mega_prenorm" (its image tasks) normalises first:
  x + Drop(Mixer(LN x)), then x + Drop(W2 SiLU(W1 LN x)). The mega mixer returns u * (h - x), so
  x + Mixer(x) is Mega's gated update; under "mega_prenorm" it reads LN x but is given x as
  `residual`, so the update is x + u * (h - x) as in Mega's pre-norm code, not x + u * (h - LN x).

  Attributes:
    glu: "sigmoid" (GLU, default) or "gelu" (GeGLU), the "++" block's gate activation.
    mixer_gate: the GELU gate and D x D output projection around the mixer (ours).
    mlp_hidden_dropout: dropout on the MLP's hidden activations as well as on its output.
    s5_gate: "half_glu1" or "half_glu2", the "s5" block's gated output layer.
    s5_dropout: the "s5" block's dropout masks, "elementwise" or "s5" (see S5_DROPOUTS).
    norm, bn_momentum: "block" (the block's own norm) or "batch" (BatchNorm, with this momentum
      for its running statistics); see make_norm.
  """
  mixer_factory: MixerFactory
  num_heads: int
  mlp_dim: int
  dropout_rate: float
  max_len: int
  block: str = "prenorm"
  glu: str = "sigmoid"
  mixer_gate: bool = False
  mlp_hidden_dropout: bool = True
  s5_gate: str = "half_glu1"
  s5_dropout: str = "elementwise"
  norm: str = "block"
  bn_momentum: float = 0.95

  @nn.compact
  def __call__(self, x, mask, carry, deterministic: bool):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry). `deterministic` is positional for nn.remat."""
    if self.block not in BLOCKS:
      raise errors.BadValue(f"model.block must be one of {BLOCKS}, got {self.block!r} "
                            "(--config.model.block=plusplus).")
    norm = lambda name: make_norm(self.norm, self.block, self.bn_momentum,  # noqa: E731
                                  deterministic, name)
    mixer = self.mixer_factory(dim=x.shape[-1], num_heads=self.num_heads, max_len=self.max_len,
                               name="mixer")
    drop = lambda y: nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)  # noqa: E731
    if self.block == "s5":
      if self.s5_gate not in S5_GATES:
        raise errors.BadValue(f"model.s5_gate must be one of {S5_GATES}, got {self.s5_gate!r}.")
      if self.s5_dropout == "s5":  # the same mask at every position (axis 1 of [B,T,D])
        drop = lambda y: nn.Dropout(self.dropout_rate, broadcast_dims=(1,))(  # noqa: E731
            y, deterministic=deterministic)
      y, carry = mixer(norm("mixer_norm")(x), mask, deterministic=deterministic,
                       carry=carry)
      z = drop(nn.gelu(y))
      gate = nn.sigmoid(nn.Dense(x.shape[-1], name="gate")(z))
      return x + drop((z if self.s5_gate == "half_glu1" else y) * gate), carry
    if self.block in ("mega", "mega_prenorm"):
      pre = self.block == "mega_prenorm"
      h = norm("mixer_norm")(x) if pre else x
      # A mixer whose output is a gated move from its input (Mega's) moves from x, not LN x.
      moves = {"residual": x} if pre and _takes_residual(mixer) else {}
      y, carry = mixer(h, mask, deterministic=deterministic, carry=carry, **moves)
      x = x + drop(y)
      x = x if pre else norm("mixer_norm")(x)
      h = norm("mlp_norm")(x) if pre else x
      y = nn.Dense(x.shape[-1], name="ffn_out")(nn.silu(nn.Dense(self.mlp_dim, name="ffn_in")(h)))
      x = x + drop(y)
      return (x if pre else norm("mlp_norm")(x)), carry
    h = norm("mixer_norm")(x)
    y, carry = mixer(h, mask, deterministic=deterministic, carry=carry)
    if self.mixer_gate:
      y = nn.gelu(nn.Dense(x.shape[-1], name="mixer_gate")(h)) * y
      y = nn.Dense(x.shape[-1], name="mixer_out")(y)
    x = x + nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)
    if self.block == "plusplus":
      mlp = GatedMlpBlock(self.mlp_dim, self.dropout_rate, self.glu, self.mlp_hidden_dropout,
                          name="mlp")
    else:
      mlp = MlpBlock(self.mlp_dim, self.dropout_rate, self.mlp_hidden_dropout, name="mlp")
    y = mlp(norm("mlp_norm")(x), deterministic=deterministic)
    return x + nn.Dropout(self.dropout_rate)(y, deterministic=deterministic), carry


class Encoder(nn.Module):
  """Embeds tokens[B,T] and returns pooled features [B,D].

  Attributes:
    embedding: "token" (a learned vector per id) or "dense" (pixel id v -> v/127.5 - 1 -> Dense),
      the S5/Latte dense variant for pixel tasks.
    patch: pixels per side of the square each token covers (dense embedding only). 1 is LRA's
      protocol, one pixel per token; p > 1 cuts the image into p x p squares, one token each (their
      p^2 scaled pixels -> Dense), a diagnostic that shortens the sequence p^2 times (Pathfinder
      study: at which length a mixer begins to learn). A square is real if all its pixels are.
    pos_encoding: "sinusoidal", "learned" or "none" (S5 and Mega rely on their recurrences).
    pooling: "mean" (over real tokens), "cls" (a learned token prepended) or "last" (the last
      real token, as the authors' Latte code pools Retrieval in its first version).
    dtype: compute dtype of the blocks ("float32" or "bfloat16"). Parameters stay float32: the
      blocks read bf16 copies of them, so gradients and optimizer state are float32. Embedding,
      final norm, pooling and the head run in float32.
    remat: recompute each block's activations in the backward pass (memory for compute).
    block, glu, mixer_gate, mlp_hidden_dropout: the blocks' kind and options (see EncoderBlock).
    final_norm: normalise the last block's output before pooling (LayerNorm, or RMSNorm under
      "plusplus"), as pre-norm transformers do; the authors' Latte code has none.
    norm, bn_momentum: every norm's kind, "block" or "batch" (BatchNorm; see make_norm).
    s5_dropout: the "s5" block's dropout, S5_DROPOUTS; "s5" also drops nothing after the
      embedding, as S5's encoder.
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
  patch: int = 1
  pos_encoding: str = "sinusoidal"
  pooling: str = "mean"
  dtype: str = "float32"
  remat: bool = False
  block: str = "prenorm"
  glu: str = "sigmoid"
  mixer_gate: bool = False
  mlp_hidden_dropout: bool = True
  final_norm: bool = True
  s5_gate: str = "half_glu1"
  s5_dropout: str = "elementwise"
  norm: str = "block"
  bn_momentum: float = 0.95

  @property
  def mixer_max_len(self) -> int:
    """The longest input a mixer sees: max_len tokens (squares of patch x patch pixels), and the
    CLS token with CLS pooling (Linformer's projections have one row per position)."""
    return self.max_len // self.patch ** 2 + (self.pooling == "cls")

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
  def __call__(self, tokens: jax.Array, mask: jax.Array, *, deterministic: bool,
               hide: jax.Array | None = None, pool: bool = True):
    """tokens, mask [B,T] -> pooled features [B,D]; with pool=False, every token's features and
    their mask, ([B,T',D], [B,T']) (T' = T / patch^2, the CLS token left out).

    hide[B,T'] (self-pretraining): the tokens whose embedding is replaced by one learned vector
    (`mask_token`, a parameter only a model that hides creates), before positions are added.
    """
    if self.patch < 1:
      raise errors.BadValue(f"model.patch must be at least 1 (pixels per side), got {self.patch}")
    if self.patch > 1 and self.embedding != "dense":
      raise errors.BadValue(f"model.patch={self.patch} embeds squares of pixel values, so it needs "
                            f"--config.model.embedding=dense (got {self.embedding!r})")
    max_len = self.max_len // self.patch ** 2
    if self.embedding == "token":
      x = nn.Embed(self.vocab_size, self.dim, name="embed")(tokens)
    elif self.embedding == "dense":
      pixels = tokens.astype(jnp.float32) / 127.5 - 1.0
      x = nn.Dense(self.dim, name="embed")(token_values(pixels, self.patch))
      mask = token_mask(mask, self.patch)
    else:
      raise errors.BadValue(f"model.embedding must be 'token' or 'dense', got {self.embedding!r}")
    if hide is not None:
      hidden = self.param("mask_token", nn.initializers.normal(0.02), (self.dim,))
      x = jnp.where(hide[..., None], hidden.astype(x.dtype), x)
    if self.pooling == "cls":
      cls = self.param("cls", nn.initializers.normal(0.02), (1, 1, self.dim))
      x = jnp.concatenate([jnp.broadcast_to(cls, (x.shape[0], 1, self.dim)), x], axis=1)
      mask = jnp.concatenate([jnp.ones_like(mask[:, :1]), mask], axis=1)
    elif self.pooling not in ("mean", "last"):
      raise errors.BadValue(f"model.pooling must be 'mean', 'cls' or 'last', got {self.pooling!r}")
    length = x.shape[1]
    if self.pos_encoding == "sinusoidal":
      x = x + jnp.asarray(sinusoidal_positions(length, self.dim))[None]
    elif self.pos_encoding == "learned":
      x = x + nn.Embed(max_len + 1, self.dim, name="positions")(jnp.arange(length))[None]
    elif self.pos_encoding != "none":
      raise errors.BadValue("model.pos_encoding must be 'sinusoidal', 'learned' or 'none', got "
                            f"{self.pos_encoding!r}")
    if self.s5_dropout not in S5_DROPOUTS:
      raise errors.BadValue(f"model.s5_dropout must be one of {S5_DROPOUTS}, got "
                            f"{self.s5_dropout!r}")
    if not (self.block == "s5" and self.s5_dropout == "s5"):
      x = nn.Dropout(self.dropout_rate)(x, deterministic=deterministic)
    x = x.astype(self.dtype)
    carry = None
    block = self._block_class()
    for i in range(self.num_layers):
      x, carry = block(self.mixer_factory, self.num_heads, self.mlp_dim, self.dropout_rate,
                       self.mixer_max_len, block=self.block, glu=self.glu,
                       mixer_gate=self.mixer_gate, mlp_hidden_dropout=self.mlp_hidden_dropout,
                       s5_gate=self.s5_gate, s5_dropout=self.s5_dropout,
                       norm=self.norm, bn_momentum=self.bn_momentum, name=f"block_{i}")(
                           x, mask, carry, deterministic)
    x = x.astype(jnp.float32)
    if self.final_norm:
      x = make_norm(self.norm, self.block, self.bn_momentum, deterministic, "final_norm")(x)
    if not pool:
      return (x[:, 1:], mask[:, 1:]) if self.pooling == "cls" else (x, mask)
    if self.pooling == "cls":
      return x[:, 0]
    if self.pooling == "last":
      # Wherever the pads are, the largest real index is the last real token.
      last = jnp.max(jnp.where(mask, jnp.arange(mask.shape[1]), 0), axis=1)
      return jnp.take_along_axis(x, last[:, None, None], axis=1)[:, 0]
    weights = mask.astype(x.dtype)[..., None]
    return jnp.sum(x * weights, axis=1) / jnp.maximum(jnp.sum(weights, axis=1), 1.0)


HEADS = ("mlp", "linear")


class Classifier(nn.Module):
  """Encoder + classifier head. Called on a batch dict; returns logits [B,C].

  A single-sequence batch has inputs/mask [B,T]; a dual one (Retrieval) has inputs1/mask1 and
  inputs2/mask2, encoded by the same weights.

  Attributes:
    head: "mlp" (Dense(D) -> GELU -> Dense(C)) or "linear" (Dense(C)). The authors' Latte code
      uses "linear" for one sequence and "mlp" for Retrieval's pair.
  """
  encoder: Encoder
  num_classes: int
  dual: bool = False
  head: str = "mlp"

  @nn.compact
  def __call__(self, batch: Mapping[str, jax.Array], *, deterministic: bool) -> jax.Array:
    if self.dual:
      u = self.encoder(batch["inputs1"], batch["mask1"], deterministic=deterministic)
      v = self.encoder(batch["inputs2"], batch["mask2"], deterministic=deterministic)
      features = jnp.concatenate([u, v, u * v, u - v], axis=-1)
    else:
      features = self.encoder(batch["inputs"], batch["mask"], deterministic=deterministic)
    if self.head == "mlp":
      features = nn.gelu(nn.Dense(self.encoder.dim, name="head_hidden")(features))
    elif self.head != "linear":
      raise errors.BadValue(f"model.head must be one of {HEADS}, got {self.head!r}")
    return nn.Dense(self.num_classes, name="head_out")(features)
