"""Softmax (full, bidirectional) attention: the quadratic baseline every mixer is compared to."""
from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import errors
from lra.models.mixers.projections import project_qkv
from lra.models.mixers.rope import rotate_queries_and_keys

# "einsum": the formula below, in one piece or query chunks; "xla" and "cudnn": the two
# implementations of jax.nn.dot_product_attention; "auto" picks one of these per device and dtype.
IMPLEMENTATIONS = ("auto", "einsum", "xla", "cudnn")
_CUDNN_DTYPES = ("bfloat16", "float16")


def softmax_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, *,
                      bias: jax.Array | None = None, query_chunk: int = 0,
                      implementation: str = "einsum") -> jax.Array:
  """Scaled dot-product attention over real keys.

  Args:
    q: [B,Tq,H,Dh] queries (Tq = T except in Luna's and Linformer's uses).
    k: [B,T,H,Dh] keys.
    v: [B,T,H,Dv] values.
    mask: [B,T] bool, True on real tokens; padded keys get zero weight.
    bias: einsum only: None, or [B,H,Tq,T] or [1,H,Tq,T] logits added to the scaled dot products
      before the softmax (the Synthesizer's synthetic logits).
    query_chunk: einsum only. If 0 < query_chunk < Tq, queries are taken this many at a time and
      the backward pass recomputes each chunk's weights from its saved log-normaliser (as
      FlashAttention does), so the [B,H,Tq,T] weights never exist whole. Same values up to float
      rounding.
    implementation: one of IMPLEMENTATIONS (see `implementation_for`). "xla" takes any mask;
      "cudnn" takes pads as key lengths, so they must be a suffix of each row (as in every batch
      of this suite): a row whose mask has a hole comes out NaN rather than silently wrong.
  Returns:
    [B,Tq,H,Dv].
  """
  implementation = implementation_for(implementation, q.dtype, q.shape[-1])
  if bias is not None and implementation != "einsum":
    raise errors.BadValue("softmax_attention: a bias runs on the einsum path, not "
                          f"{implementation}")
  if implementation == "xla":
    return jax.nn.dot_product_attention(q, k, v, mask=mask[:, None, None, :], implementation="xla")
  if implementation == "cudnn":
    return _cudnn_attention(q, k, v, mask)
  num_queries = q.shape[1]
  if not 0 < query_chunk < num_queries:
    probs = jax.nn.softmax(_logits(q, k, mask, bias), axis=-1)
    return jnp.einsum("bhts,bshd->bthd", probs, v)
  extra = -(-num_queries // query_chunk) * query_chunk - num_queries
  q = jnp.pad(q, ((0, 0), (0, extra), (0, 0), (0, 0)))
  if bias is not None:
    bias = jnp.pad(bias, ((0, 0), (0, 0), (0, extra), (0, 0)))
  return _chunked_attention(q, k, v, mask, bias, query_chunk)[:, :num_queries]


def einsum_path(settings: dict) -> str:
  """The einsum path's record for a mixer block with a `query_chunk` setting."""
  chunk = settings.get("query_chunk", 0)
  return f"einsum (query chunks of {chunk})" if chunk > 0 else "einsum (one piece)"


def implementation_for(implementation: str, dtype, head_dim: int | None) -> str:
  """What `implementation` runs as on this process's default backend: "auto" becomes "cudnn"
  where cuDNN's fused attention can take the inputs (an NVIDIA GPU, bf16/f16, a head dim it
  supports; `head_dim` None: not checked), else "einsum", so CPU and TPU runs and f32 GPU runs
  compute exactly what they did before the setting existed. An explicit "cudnn" that cannot run
  is a one-line error saying why."""
  if implementation not in IMPLEMENTATIONS:
    raise errors.BadValue("mixers.softmax.implementation must be one of "
                          f"{', '.join(IMPLEMENTATIONS)}; found {implementation!r}.")
  if implementation not in ("auto", "cudnn"):
    return implementation
  refusal = _cudnn_refusal(jnp.dtype(dtype).name, head_dim)
  if implementation == "auto":
    return "einsum" if refusal else "cudnn"
  if refusal:
    raise errors.BadValue(f"mixers.softmax.implementation=cudnn cannot run: {refusal}. Pass "
                          "--config.mixers.softmax.implementation=auto (or xla).")
  return "cudnn"


def _cudnn_refusal(dtype: str, head_dim: int | None) -> str:
  """Why cuDNN's fused attention cannot take these inputs here ("" when it can)."""
  device = jax.devices()[0]
  if device.platform != "gpu" or "cuda" not in getattr(device.client, "platform_version", ""):
    return f"cuDNN runs on NVIDIA GPUs and this process runs on {device.platform}"
  if dtype not in _CUDNN_DTYPES:
    return (f"cuDNN's fused attention takes bfloat16 or float16 and the model computes in {dtype} "
            "(--config.model.dtype=bfloat16)")
  # 128 is the limit on every generation cuDNN supports (Hopper takes 256), so "auto" decides
  # the same way on every card.
  if head_dim is not None and not (head_dim % 8 == 0 and head_dim <= 128):
    return (f"cuDNN takes head dims (model.dim / model.num_heads) that are multiples of 8 up to "
            f"128; found {head_dim}")
  return ""


def _cudnn_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
  """jax.nn.dot_product_attention on cuDNN, the [B,T] mask given as key lengths [B]."""
  lengths = jnp.sum(mask, axis=-1, dtype=jnp.int32)
  is_suffix = jnp.all(mask == (jnp.arange(mask.shape[1])[None, :] < lengths[:, None]),
                      axis=-1)  # [B]
  # An all-pad row attends to its first (pad) key where the einsum path spreads it over all
  # pads: finite either way, and nothing reads it; what cuDNN returns for zero keys is unstated.
  y = jax.nn.dot_product_attention(q, k, v, key_value_seq_lengths=jnp.maximum(lengths, 1),
                                   implementation="cudnn")
  return jnp.where(is_suffix[:, None, None, None], y, jnp.nan)


def _logits(q: jax.Array, k: jax.Array, mask: jax.Array, bias: jax.Array | None) -> jax.Array:
  """[B,Tq,H,Dh], [B,T,H,Dh], [B,T], bias -> scaled logits [B,H,Tq,T] plus the bias, pads at the
  dtype's minimum."""
  logits = jnp.einsum("bthd,bshd->bhts", q * q.shape[-1] ** -0.5, k)
  if bias is not None:
    logits = logits + bias
  # finfo.min rather than -inf keeps an all-pad row finite (its outputs are ignored anyway).
  return jnp.where(mask[:, None, None, :], logits, jnp.finfo(logits.dtype).min)


def _to_chunks(x: jax.Array, chunk: int) -> jax.Array:
  """[B,N*Q,...] -> [N,B,Q,...]: the leading axis is what lax.map and lax.scan walk over."""
  return jnp.moveaxis(x.reshape(x.shape[0], -1, chunk, *x.shape[2:]), 1, 0)


def _from_chunks(x: jax.Array) -> jax.Array:
  """[N,B,Q,...] -> [B,N*Q,...]."""
  return jnp.moveaxis(x, 0, 1).reshape(x.shape[1], -1, *x.shape[3:])


def _bias_to_chunks(bias: jax.Array | None, chunk: int) -> jax.Array | None:
  """[Bb,H,N*Q,T] -> [N,Bb,H,Q,T] (None stays None: lax.map and lax.scan carry it as no leaves)."""
  if bias is None:
    return None
  return jnp.moveaxis(bias.reshape(*bias.shape[:2], -1, chunk, bias.shape[-1]), 2, 0)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _chunked_attention(q, k, v, mask, bias, chunk):
  """softmax_attention with Tq a multiple of `chunk`, one query chunk at a time."""
  return _chunked_forward(q, k, v, mask, bias, chunk)[0]


def _chunked_forward(q, k, v, mask, bias, chunk):
  def attend(inputs):
    q_chunk, bias_chunk = inputs
    logits = _logits(q_chunk, k, mask, bias_chunk)           # [B,H,Q,T]
    top = logits.max(-1, keepdims=True)
    unnormalised = jnp.exp(logits - top)
    total = unnormalised.sum(-1, keepdims=True)
    # Dividing the [Q,Dv] output rather than the [Q,T] weights saves a pass over the weights.
    y = jnp.einsum("bhts,bshd->bthd", unnormalised, v) / jnp.moveaxis(total, 1, 2)
    return y, (top + jnp.log(total))[..., 0]                  # log-normaliser [B,H,Q]

  y, log_norm = jax.lax.map(attend, (_to_chunks(q, chunk), _bias_to_chunks(bias, chunk)))
  y = _from_chunks(y)
  return y, (q, k, v, mask, bias, y, log_norm)


def _chunked_backward(chunk, saved, dy):
  q, k, v, mask, bias, y, log_norm = saved
  # d(softmax)/d(logits) needs sum_s p_ts dp_ts = sum_d dy_td y_td: a [T] row sum, not a [T,T] one.
  dy_dot_y = jnp.swapaxes(_to_chunks(jnp.einsum("bthd,bthd->bth", dy, y), chunk), 2, 3)  # [N,B,H,Q]

  def step(carry, chunk_inputs):
    dk, dv = carry
    q_chunk, bias_chunk, dy_chunk, log_norm_chunk, dy_dot_y_chunk = chunk_inputs
    probs = jnp.exp(_logits(q_chunk, k, mask, bias_chunk) - log_norm_chunk[..., None])  # [B,H,Q,T]
    dv = dv + jnp.einsum("bhts,bthd->bshd", probs, dy_chunk)
    dprobs = jnp.einsum("bthd,bshd->bhts", dy_chunk, v)
    dbias = probs * (dprobs - dy_dot_y_chunk[..., None])    # d(loss)/d(logits) before the scale
    dlogits = dbias * q.shape[-1] ** -0.5
    dk = dk + jnp.einsum("bhts,bthd->bshd", dlogits, q_chunk)
    if bias_chunk is not None and bias_chunk.shape[0] == 1:  # broadcast over the batch
      dbias = dbias.sum(0, keepdims=True)
    return (dk, dv), (jnp.einsum("bhts,bshd->bthd", dlogits, k),
                      None if bias_chunk is None else dbias.astype(bias_chunk.dtype))

  chunks = (_to_chunks(q, chunk), _bias_to_chunks(bias, chunk), _to_chunks(dy, chunk), log_norm,
            dy_dot_y)
  (dk, dv), (dq, dbias) = jax.lax.scan(step, (jnp.zeros_like(k), jnp.zeros_like(v)), chunks)
  if dbias is not None:  # [N,Bb,H,Q,T] -> [Bb,H,N*Q,T]
    dbias = jnp.moveaxis(dbias, 0, 2).reshape(bias.shape)
  return _from_chunks(dq), dk, dv, None, dbias


_chunked_attention.defvjp(_chunked_forward, _chunked_backward)


class SoftmaxMixer(nn.Module):
  """Softmax attention (Vaswani et al. 2017): exact, O(T^2) time and memory.

  Attributes:
    query_chunk: queries per chunk (0: all at once) on the einsum path. On a CPU the [B,H,T,T]
      weights of long sequences are gigabytes written, faulted in and freed every step; chunks
      keep them small (`lra bench` measures the trade; docs/presets_cpu.md has the numbers).
    implementation: "auto" (cuDNN's fused attention on an NVIDIA GPU in bf16/f16, else einsum),
      "einsum" (the formula, in query chunks if query_chunk > 0), "xla" or "cudnn"
      (jax.nn.dot_product_attention's two implementations). See `softmax_attention`.
    rope: rotate queries and keys by position (RoPE, models/mixers/rope.py), so the scores see
      relative positions; the SPT paper's Transformers (arXiv 2310.02980, Section 3.2) and
      arXiv 2501.14850 use it. Off: the encoder's absolute positions alone, as LRA ran.
  """
  dim: int
  num_heads: int
  max_len: int
  query_chunk: int = 0
  implementation: str = "auto"
  rope: bool = False

  @classmethod
  def execution_path(cls, settings: dict, dtype: str, head_dim: int | None = None) -> str:
    """What a model with this config block computes through on this process's backend, e.g.
    "cudnn", "xla", "einsum (one piece)", "einsum (query chunks of 128)"."""
    path = implementation_for(settings.get("implementation", "auto"), dtype, head_dim)
    return einsum_path(settings) if path == "einsum" else path

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    head_dim = self.dim // self.num_heads
    q, k, v = project_qkv(x, self.num_heads, head_dim)
    if self.rope:
      q, k = rotate_queries_and_keys(q, k, "softmax")
    y = softmax_attention(q, k, v, mask, query_chunk=self.query_chunk,
                          implementation=self.implementation)
    y = nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(y)
    return y, carry
