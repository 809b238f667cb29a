"""S5 (Smith et al. 2023): a diagonal linear state space layer run by parallel scans, both ways.

x_t = Lambda_bar x_{t-1} + B_bar u_t forwards and x'_t = Lambda_bar x'_{t+1} + B_bar u_t backwards
(Lambda and B shared, as S5's bidirectional LRA runs), y_t = 2 Re(C1 x_t + C2 x'_t) + D u_t.
Zero-order hold: Lambda_bar = exp(Lambda dt), B_bar = (Lambda_bar - 1) / Lambda B, with
dt = exp(log_step) learned per mode. Initialisation (HiPPO-N blocks, conjugate pairs): s5_init.py.

`activation` is what S5's own layer (lindermanlab/S5 `s5/layers.py`, SequenceLayer) applies to the
SSM's output before its residual: in S5's code a nonlinearity always follows the scans (GELU, and a
sigmoid gate in its default "half_glu1"), so the common block's S5 is the SSM with that output
layer ("none", the bare linear SSM, is what runs made before 2026-11-28 used; docs/mixers.md).
"""
from __future__ import annotations

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra import errors
from lra.models.mixers import s5_init


def _combine(earlier, later):
  """Composes two steps x -> a x + b of a diagonal linear recurrence (the scan's operator)."""
  a_i, b_i = earlier
  a_j, b_j = later
  return a_j * a_i, a_j * b_i + b_j


def s5_ssm(u: jax.Array, mask: jax.Array, lambda_bar: jax.Array, b_bar: jax.Array,
           c_fwd: jax.Array, c_bwd: jax.Array) -> jax.Array:
  """The bidirectional discretised SSM over real tokens (without the D u feed-through).

  Pads enter as zero inputs. Forwards they come after every real token; backwards the state
  reaching the last real token from the pads is exactly zero (a zero state times Lambda_bar plus
  a zero input), so the backward scan starts at the last real token, as on the unpadded sequence.

  Args:
    u: [B,T,D] real inputs.
    mask: [B,T] bool, True on real tokens.
    lambda_bar: [P] complex, the discretised diagonal state matrix (P modes, one per conjugate
      pair).
    b_bar: [P,D] complex input matrix.
    c_fwd, c_bwd: [D,P] complex output matrices of the two directions.
  Returns:
    [B,T,D] float32, 2 Re(C1 x_t + C2 x'_t); O(B T P D) time, O(B T P) memory, O(log T) depth.
  """
  u = jnp.where(mask[..., None], u, 0.0).astype(jnp.float32)
  bu = (jnp.einsum("btd,pd->btp", u, b_bar.real)
        + 1j * jnp.einsum("btd,pd->btp", u, b_bar.imag))               # [B,T,P]
  # [1,T,P], not [B,T,P]: the scans broadcast it over the batch; a [B,T,P] copy of Lambda_bar per
  # direction cost up to 40% more temporary memory than lindermanlab/S5's S5SSM (lra bench
  # --against, docs/performance.md), for the same values.
  a = jnp.broadcast_to(lambda_bar, (1, *bu.shape[1:]))
  _, x_fwd = jax.lax.associative_scan(_combine, (a, bu), axis=1)
  _, x_bwd = jax.lax.associative_scan(_combine, (a, bu), axis=1, reverse=True)

  def real_out(x, c):  # Re(C x) without a complex matmul
    return jnp.einsum("btp,dp->btd", x.real, c.real) - jnp.einsum("btp,dp->btd", x.imag, c.imag)
  return 2.0 * (real_out(x_fwd, c_fwd) + real_out(x_bwd, c_bwd))


def discretise_zoh(lam: jax.Array, b: jax.Array, step: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Zero-order hold: Lambda [P], B [P,D], step [P] -> Lambda_bar [P], B_bar [P,D]."""
  lambda_bar = jnp.exp(lam * step)
  return lambda_bar, ((lambda_bar - 1.0) / lam)[:, None] * b


def _complex(pair: jax.Array) -> jax.Array:
  return pair[..., 0].astype(jnp.float32) + 1j * pair[..., 1].astype(jnp.float32)


def _as_pair(z: jax.Array) -> jax.Array:
  return jnp.stack([z.real, z.imag], axis=-1).astype(jnp.float32)


C_INITS = ("trunc_standard_normal", "lecun_normal", "complex_normal")
# S5's `--activation_fn` choices (run_train.py), "full_glu" aside, and "none" (the bare SSM).
ACTIVATIONS = ("none", "gelu", "half_glu1", "half_glu2")


def output_layer(y: jax.Array, activation: str, gate: Callable[[jax.Array], jax.Array]
                 ) -> jax.Array:
  """S5's layer after the scans (s5/layers.py): z = GELU(y); "half_glu1": z * sigmoid(W z),
  "half_glu2": y * sigmoid(W z); "gelu": z; "none": y. `gate` is the D x D map W."""
  if activation == "none":
    return y
  z = nn.gelu(y)
  if activation == "gelu":
    return z
  return (z if activation == "half_glu1" else y) * nn.sigmoid(gate(z))


class S5Mixer(nn.Module):
  """S5: bidirectional diagonal SSM (HiPPO-N init, ZOH, parallel scans), O(T P) per channel.

  Attributes:
    state_size: P before conjugate symmetry; P/2 complex modes are kept.
    blocks: J, copies of HiPPO-N of size P/J on the initial state matrix's diagonal.
    c_init: "trunc_standard_normal" or "lecun_normal" (a real C times V) or "complex_normal"
      (C drawn directly), S5's three options.
    dt_min, dt_max: the range of the initial steps dt (log-uniform).
    clip_eigs: keep Re(Lambda) <= -1e-4 (S5's option, set for its Image run).
    ssm_params: this mixer's parameters trained at `train.ssm_learning_rate` without weight decay
      (lra/training/optim.py reads this field); S5's "standard" group by default.
    activation: S5's output layer after the scans (output_layer); "none" under the published
      block (model.block=s5), which applies it itself. The default here is "none" so that run
      folders made before the setting existed rebuild the model they trained; configs set
      "half_glu1", S5's default.
  """
  dim: int
  num_heads: int
  max_len: int
  state_size: int = 256
  blocks: int = 8
  c_init: str = "trunc_standard_normal"
  dt_min: float = 0.001
  dt_max: float = 0.1
  clip_eigs: bool = False
  ssm_params: str = "Lambda_re,Lambda_im,log_step,B"
  activation: str = "none"

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool, carry=None):
    """x: [B,T,D], mask: [B,T] -> ([B,T,D], carry)."""
    if self.c_init not in C_INITS:
      raise errors.BadValue(f"s5: c_init must be one of {C_INITS}, got {self.c_init!r} "
                            "(--config.mixers.s5.c_init=lecun_normal).")
    if self.activation not in ACTIVATIONS:
      raise errors.BadValue(f"s5: activation must be one of {ACTIVATIONS}, got {self.activation!r} "
                            "(--config.mixers.s5.activation=half_glu1).")
    lam0, v, v_inv = s5_init.block_diagonal_init(self.state_size, self.blocks)
    full, d = self.state_size, self.dim
    lam_re = self.param("Lambda_re", lambda _: jnp.asarray(lam0.real, jnp.float32))
    lam_im = self.param("Lambda_im", lambda _: jnp.asarray(lam0.imag, jnp.float32))
    # B and C are drawn real over all P states and expressed in the eigenbasis (S5, Appendix B).
    b = self.param("B", lambda key: _as_pair(jnp.asarray(v_inv, jnp.complex64) @ nn.initializers.
                                             lecun_normal()(key, (full, d))))
    c_fwd, c_bwd = (self.param(name, self._c_init(v)) for name in ("C1", "C2"))
    feedthrough = self.param("D", nn.initializers.normal(1.0), (d,))
    log_step = self.param("log_step", lambda key: jax.random.uniform(
        key, (full // 2,), minval=np.log(self.dt_min), maxval=np.log(self.dt_max)))
    lam_re = lam_re.astype(jnp.float32)
    if self.clip_eigs:
      lam_re = jnp.minimum(lam_re, -1e-4)
    lambda_bar, b_bar = discretise_zoh(lam_re + 1j * lam_im.astype(jnp.float32), _complex(b),
                                       jnp.exp(log_step.astype(jnp.float32)))
    y = s5_ssm(x, mask, lambda_bar, b_bar, _complex(c_fwd), _complex(c_bwd))
    y = y + feedthrough.astype(jnp.float32)[None, None] * x.astype(jnp.float32)
    y = output_layer(y.astype(x.dtype), self.activation, nn.Dense(d, name="gate"))
    return y, carry

  def _c_init(self, v: np.ndarray):
    full, d = self.state_size, self.dim

    def init(key):
      if self.c_init == "complex_normal":
        return nn.initializers.normal(0.5 ** 0.5)(key, (d, full // 2, 2))
      # S5's ssm_init.py: trunc_standard_normal draws each row with variance 1/P,
      # lecun_normal the whole [D,P,2] array with variance 1/(P D).
      per_row = (0,) if self.c_init == "trunc_standard_normal" else ()
      c = nn.initializers.variance_scaling(1.0, "fan_in", "truncated_normal",
                                           batch_axis=per_row)(key, (d, full, 2))
      return _as_pair(_complex(c) @ jnp.asarray(v, jnp.complex64))
    return init
