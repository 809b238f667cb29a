"""The mixer contract as measurements: each property of a mixer checked, with its numbers.

The registry-wide tests (tests/test_mixer_contract.py) and `lra check MIXER` both run these, so a
mixer that passes one passes the other. Properties (`PROPERTIES`, in the order they print):
shape, dtype (y in x's dtype), finite, padding invariance (new pad contents or more pads change no
real output), bidirectional (the last real token reaches the first output), jit (jitted = eager),
deterministic,
carry (the state a mixer passes to the next layer ignores pads too), finite gradients (w.r.t.
parameters and inputs, also with huge pad values), forward derivatives (jax.jvp through the same
padded rows: finite everywhere, and equal to backpropagation's), memory (forward + backward at
T=8192 under 1/8 of softmax attention's; for a mixer quadratic by design, whose class says why in
`QUADRATIC`, growing no faster than T^2 from T=4096 to 8192 and at most twice softmax's). When the
shape fails the others are skipped: each reads y as x's shape, so each would fail for that one
reason. `shape_problem` is the shape check alone,
traced, never run: `lra run` makes it of a mixer from outside the suite before training.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import re
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lra import errors
from lra.base import tracebacks
from lra.models.mixers.softmax import SoftmaxMixer

TOLERANCE = 1e-4      # max abs change of a real output that still counts as "unchanged" in f32
# Where matmuls round their inputs (TF32 on NVIDIA GPUs, bf16 passes on TPUs) two programs that
# compute the same thing (another length, jitted or eager) may round differently: a relative error
# of a few unit roundoffs per matmul, compounded over the mixer's four or five matmuls. The checks
# that compare outputs therefore allow ROUNDING_SLACK unit roundoffs of the largest real output
# (TF32: 16 * 2^-11 = 0.8%), or the f32 tolerance if larger. A pad that leaks moves real outputs
# by a sizeable fraction of their scale (pads at ±100, or 8 more pads in a mean over 24 tokens),
# far above that.
ROUNDING_SLACK = 16
PAD_NOISE = 100.0     # scale of the new pad contents in the invariance checks
HUGE = 1e4            # pad contents in the gradient check: exp of a logit read from them overflows
PADS = 7              # at the end of the second of the two rows
MEMORY_T = 8192
MEMORY_FRACTION = 1 / 8  # softmax's T x T scores alone are 512 MiB per head at T=8192
# A mixer quadratic by design (a class attribute QUADRATIC: str says why; the synthesizer's [T,T]
# logits, the Sparse Transformer's fixed blocks) promises instead to be no worse than softmax's
# kind of cost: memory growing no faster than T^2 (at most 4x from T=4096 to 8192, with this much
# slack for XLA's buffer plan; a [T,T,T] array made by mistake grows 8x) and at most
# QUADRATIC_FACTOR times softmax attention's at T=8192 (the synthesizer's own [H,T,T] weights and
# their gradient come on top of the attention it shares with softmax).
QUADRATIC_GROWTH = 4.2
QUADRATIC_FACTOR = 2.0
BASELINE = "softmax"  # the quadratic mixer the memory property compares with (SoftmaxMixer)


@dataclasses.dataclass(frozen=True)
class Result:
  """One property: passed (None when it does not apply, or was skipped) and what was measured.
  `error`: the mixer's own code raised while it was checked (where, and its source line); the
  property is then neither passed nor failed but not checkable, and neither are the rest."""
  name: str
  passed: bool | None
  detail: str
  skipped: bool = False  # not checked, because the shape fails or the mixer raised
  error: str | None = None

  def line(self) -> str:
    if self.error is not None:
      return f"ERROR {self.error}"
    mark = "SKIP" if self.skipped else {True: "PASS", False: "FAIL", None: "n/a "}[self.passed]
    return f"{mark}  {self.name:<19} {self.detail}"


class MixerShapeError(errors.BadValue):
  """A mixer whose output is not (y of x's shape, carry); one line that says what it returned."""


# How the encoder calls every mixer (models/encoder.py), as a user's file should declare it.
SIGNATURE = "(x, mask, *, deterministic, carry=None) -> (y, carry)"


def signature_problem(cls: type[nn.Module]) -> str | None:
  """What keeps `cls.__call__` from being called as the encoder calls a mixer,
  `mixer(x, mask, deterministic=..., carry=...)`, quoting the signature it has and the one
  expected; None when it can be (read from the signature: nothing is run)."""
  try:
    signature = inspect.signature(cls.__call__)
  except (TypeError, ValueError):
    return None  # a signature Python cannot read: the call itself will say
  try:
    signature.bind(None, "x", "mask", deterministic=True, carry=None)
  except TypeError as e:
    shown = str(signature).replace("(self, ", "(", 1)
    return (f"__call__{shown} cannot be called as the encoder calls a mixer ({e}): a mixer "
            f"is called as {SIGNATURE}")
  return None


def shape_problem(module: nn.Module, x_shape: tuple[int, ...]) -> str | None:
  """What is wrong with the form of `module(x[B,T,D], mask[B,T], deterministic=True)`'s output,
  e.g. "returned [2, 24, 8] for x [2, 24, 16]: a mixer returns x's shape", or with its call
  signature (signature_problem); None when it is (y [B,T,D] of x's shape, carry). Traced by
  jax.eval_shape: nothing is computed, so it is cheap at any size. An exception of the mixer's
  own propagates."""
  problem = signature_problem(type(module))
  if problem:
    return problem
  x = jax.ShapeDtypeStruct(tuple(x_shape), jnp.float32)
  mask = jax.ShapeDtypeStruct(tuple(x_shape[:2]), jnp.bool_)
  out, _ = jax.eval_shape(lambda key, a, m: module.init_with_output(key, a, m, deterministic=True),
                          jax.random.PRNGKey(0), x, mask)
  if not (isinstance(out, (tuple, list)) and len(out) == 2):
    found = (f"a {type(out).__name__} of {len(out)}" if isinstance(out, (tuple, list)) else
             f"{list(out.shape)}" if hasattr(out, "shape") else type(out).__name__)
    return f"returned {found} for x {list(x.shape)}: a mixer returns the pair (y, carry)"
  y = out[0]
  if not hasattr(y, "shape"):
    return f"returned y of type {type(y).__name__}: a mixer returns (y [B,T,D], carry)"
  if tuple(y.shape) != x.shape:
    return f"returned {list(y.shape)} for x {list(x.shape)}: a mixer returns x's shape"
  return None


@functools.cache
def _compiler_options() -> dict[str, Any] | None:
  # The checks run tiny inputs once each, so compile time is nearly all their cost. LLVM's
  # optimisation level 0 halves it on CPU and changes neither what is computed nor XLA's buffer
  # plan (train_step_bytes is identical).
  return {"xla_backend_optimization_level": 0} if jax.default_backend() == "cpu" else None


def _max_abs(a: Any, b: Any = 0.0) -> float:
  diff = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
  return float(diff.max()) if diff.size else 0.0


def matmul_roundoff(backend: str | None = None, precision: str | None = None) -> float:
  """Unit roundoff of an f32 matmul's inputs on `backend` (default: this process's) at the
  matmul precision in force (`jax.config.jax_default_matmul_precision`; None = the backend's
  default): 2^-24 in full f32, 2^-11 in TF32, 2^-8 in bf16 (2^-16 for TPU's three bf16 passes)."""
  backend = backend or jax.default_backend()
  precision = str(precision or jax.config.jax_default_matmul_precision or "default").lower()
  if backend == "cpu" or precision in ("highest", "float32"):  # the CPU ignores the setting
    return 2.0 ** -24
  if backend == "tpu":
    return 2.0 ** -16 if precision in ("high", "tensorfloat32", "bfloat16_3x") else 2.0 ** -8
  return 2.0 ** -11  # NVIDIA GPUs: default and high are TF32


def _finite(tree: Any) -> bool:
  return all(np.isfinite(np.asarray(leaf)).all() for leaf in jax.tree.leaves(tree))


class MixerContract:
  """One mixer class with its settings at a small size; the checks share its compiled functions.

  The base input x is [2,T,D] (T=`length`), its second row ending in PADS pads. Most checks read
  one jitted forward + backward over four versions of it stacked on the batch axis (`ROWS`):
  as is, pads at ±PAD_NOISE, the last real token changed, pads at ±HUGE. The module is built with
  max_len = T + `extra_pads` (the padding check appends that many pads, as a task's seq_len
  would allow).
  """
  ROWS = ("clean", "noisy", "changed", "huge")

  def __init__(self, cls: type[nn.Module], settings: dict[str, Any], *, dim: int = 16,
               num_heads: int = 2, length: int = 24, extra_pads: int = 8):
    self.cls, self.settings = cls, dict(settings)
    self.dim, self.num_heads, self.length, self.extra_pads = dim, num_heads, length, extra_pads
    self.is_baseline = cls is SoftmaxMixer
    self.module = module = cls(dim=dim, num_heads=num_heads, max_len=length + extra_pads,
                               **settings)
    self.x = jax.random.normal(jax.random.PRNGKey(0), (2, length, dim))
    self.mask = jnp.arange(length)[None, :] < jnp.array([[length], [length - PADS]])  # [2,T]
    self.last = length - PADS - 1  # the last real token of the second row
    pads = lambda scale, seed: jnp.where(
        self.mask[..., None], self.x, scale * jax.random.normal(jax.random.PRNGKey(seed),
                                                                self.x.shape))
    self.inputs = jnp.concatenate([self.x, pads(PAD_NOISE, 2), self.x.at[1, self.last].add(3.0),
                                   pads(HUGE, 3)])                       # [4*2,T,D], as ROWS
    self.masks = jnp.tile(self.mask, (len(self.ROWS), 1))
    weights = jax.random.normal(jax.random.PRNGKey(4), self.inputs.shape)

    def loss(params, x):  # on real outputs only, as in training
      y, carry = module.apply(params, x, self.masks, deterministic=True)
      return jnp.sum(jnp.where(self.masks[..., None], y * weights, 0.0)), (y, carry)

    self._loss = loss
    self._loss_grad = jax.grad(loss, argnums=(0, 1), has_aux=True)
    self._apply = lambda p, x, m, carry: module.apply(p, x, m, deterministic=True, carry=carry)
    self._compiled = {}
    self.error: str | None = None  # where the mixer's own code raised (check), once it has

  @functools.cached_property
  def _eager_init(self):
    # Eager, not jitted: the jit check needs an eager forward anyway, and init runs one.
    return self.module.init_with_output(jax.random.PRNGKey(1), self.x, self.mask,
                                        deterministic=True)

  @property
  def params(self):
    return self._eager_init[1]

  def _call(self, name: str, fn: Callable, *args):
    """fn(*args) through a program compiled once per (name, shapes), for compile speed."""
    key = (name, jax.tree.structure(args), tuple(jnp.shape(a) for a in jax.tree.leaves(args)))
    if key not in self._compiled:
      self._compiled[key] = jax.jit(fn).lower(*args).compile(_compiler_options())
    return self._compiled[key](*args)

  def forward(self, x: jax.Array, mask: jax.Array, carry=None):
    """(y [B,T,D], carry) in eval mode, jitted."""
    return self._call("forward", self._apply, self.params, x, mask, carry)

  def run(self) -> dict[str, Any]:
    """One compiled call: per name of ROWS y and dL/dx [2,T,D] and the carry's leaves; dL/dparams
    summed over all rows; the carry as returned for the whole [8,T,D] batch."""
    (d_params, d_x), (y, carry) = self._call("loss_grad", self._loss_grad, self.params,
                                             self.inputs)
    rows = lambda a: dict(zip(self.ROWS, np.split(np.asarray(a), len(self.ROWS))))
    return {"y": rows(y), "d_x": rows(d_x), "d_params": d_params,
            "carry": None if carry is None else [rows(c) for c in jax.tree.leaves(carry)],
            "carry_batch": carry}

  @functools.cached_property
  def ran(self) -> dict[str, Any]:
    return self.run()

  def tolerance(self, floor: float) -> float:
    """Max abs difference between real outputs of two programs that compute the same thing:
    `floor` (enough in f32) or ROUNDING_SLACK unit roundoffs of the largest real output."""
    scale = _max_abs(self.ran["y"]["clean"][np.asarray(self.mask)])
    return max(floor, ROUNDING_SLACK * matmul_roundoff() * scale)

  # Properties: each returns (passed, detail).

  def shape(self):
    # Traced on its own: the other checks read y as x's shape (weights like x, x's mask), so
    # they would fail on a wrong shape before saying what it is.
    problem = shape_problem(self.module, self.x.shape)
    return problem is None, problem or f"y {list(self.x.shape)} for x {list(self.x.shape)}"

  def dtype(self):
    # The encoder adds y to x: a y of another dtype (float16 from float32, say) would change the
    # residual stream's precision (or, from bfloat16, its memory) without anyone asking for it.
    # Both dtypes a run computes in (model.dtype), as the encoder runs a mixer under bfloat16:
    # its parameters cast to bfloat16 too (models/encoder.py, Encoder._block_class).
    variables = jax.eval_shape(lambda a, m: self.module.init(
        jax.random.PRNGKey(0), a, m, deterministic=True), self.x, self.mask)
    found = []
    for dtype in (self.x.dtype, jnp.dtype(jnp.bfloat16)):
      cast = jax.tree.map(lambda a, d=dtype: jax.ShapeDtypeStruct(
          a.shape, d if jnp.issubdtype(a.dtype, jnp.floating) else a.dtype), variables["params"])
      y, _ = jax.eval_shape(lambda v, a, m: self.module.apply(v, a, m, deterministic=True),
                            {**variables, "params": cast}, self.x.astype(dtype), self.mask)
      found.append((dtype, y.dtype))
    same = all(x == y for x, y in found)
    return same, (", ".join(f"y {y} for x {x}" for x, y in found) + ("" if same else
                  ": a mixer returns x's dtype (compute in another inside if you must, and cast "
                  "back: y.astype(x.dtype))"))

  def finite(self):
    y, noisy = self.ran["y"]["clean"], self.ran["y"]["noisy"]
    ok = bool(np.isfinite(y).all() and np.isfinite(noisy).all())
    return ok, f"max |y| {_max_abs(y):.3g}, {_max_abs(noisy):.3g} with pads at ±{PAD_NOISE:g}"

  def padding_invariance(self):
    real, y = np.asarray(self.mask), self.ran["y"]["clean"]
    pads = jnp.zeros((2, self.extra_pads), bool)
    longer = np.asarray(self.forward(
        jnp.concatenate([self.x, jnp.zeros((2, self.extra_pads, self.dim))], axis=1),
        jnp.concatenate([self.mask, pads], axis=1))[0])[:, :self.length]
    by_noise = _max_abs(self.ran["y"]["noisy"][real], y[real])
    by_length = _max_abs(longer[real], y[real])
    tolerance = self.tolerance(TOLERANCE)
    return (by_noise <= tolerance and by_length <= tolerance,  # False on NaN too
            f"max |change| of real outputs: {by_noise:.2g} with pads at ±{PAD_NOISE:g} noise, "
            f"{by_length:.2g} with {self.extra_pads} more pads (tolerance {tolerance:.2g})")

  def bidirectional(self):
    change = _max_abs(self.ran["y"]["changed"][1, 0], self.ran["y"]["clean"][1, 0])
    return change > 1e-6, (f"max |change| of the first output when the last real token changes: "
                           f"{change:.2g} (needs > 1e-6)")

  def jit(self):
    gap = _max_abs(self._eager_init[0][0], self.ran["y"]["clean"])
    tolerance = self.tolerance(1e-5)
    return gap <= tolerance, f"max |jitted - eager| {gap:.2g} (tolerance {tolerance:.2g})"

  def deterministic(self):
    again, y = self.run()["y"]["clean"], self.ran["y"]["clean"]
    ok = np.array_equal(again, y)
    return ok, ("two calls on the same input are " + ("identical" if ok else
                f"different (max |change| {_max_abs(again, y):.2g})"))

  def carry(self):
    if self.ran["carry"] is None:
      return True, "returns no carry (None)"
    real = np.asarray(self.mask)
    by_carry = float(np.max([0.0, *(_max_abs(c["noisy"], c["clean"]) for c in self.ran["carry"])]))
    # A second layer fed the first one's carry, as encoder blocks do.
    y2 = np.asarray(self.forward(self.inputs, self.masks, self.ran["carry_batch"])[0])
    y2, y2_noisy = np.split(y2, len(self.ROWS))[:2]
    by_output = _max_abs(y2_noisy[real], y2[real])
    tolerance = self.tolerance(TOLERANCE)
    ok = (by_carry <= tolerance and by_output <= tolerance and y2.shape == self.x.shape
          and _finite(y2))
    return ok, (f"a second layer fed the carry: shape {list(y2.shape)}; max |change| with "
                f"pads at ±{PAD_NOISE:g}: carry {by_carry:.2g}, real outputs {by_output:.2g}")

  def finite_gradients(self):
    d_x, real = self.ran["d_x"], np.asarray(self.mask)
    d_params = jax.tree.leaves(self.ran["d_params"])
    bad = [f"inputs ({row} rows)" for row in self.ROWS if not _finite(d_x[row])]
    bad += [] if _finite(d_params) else ["params"]
    return not bad, ((f"NaN/inf w.r.t. {', '.join(bad)}" if bad else "all finite") +
                     f"; max |dL/dparams| {np.max([0.0, *map(_max_abs, d_params)]):.3g}; with "
                     f"pads at ±{HUGE:g}: max |dL/dx| {_max_abs(d_x['huge'][real]):.3g} at real "
                     f"tokens, {_max_abs(d_x['huge'][~real]):.2g} at pads")

  def forward_derivatives(self):
    # A random direction in parameters and inputs (pads included). A query row whose keys are all
    # pads has a softmax total of 0: dividing by a tiny floor there keeps the forward and the
    # backward pass finite but makes the tangent 0/0 = NaN, which a later layer's attention then
    # spreads to real tokens (0 weight x NaN). Hessian-vector products and jacfwd go through here.
    keys = iter(jax.random.split(jax.random.PRNGKey(5), 1 + len(jax.tree.leaves(self.params))))
    d_params = jax.tree.map(lambda a: jax.random.normal(next(keys), a.shape, a.dtype), self.params)
    d_x = jax.random.normal(next(keys), self.inputs.shape)
    jvp = lambda p, x, dp, dx: jax.jvp(self._loss, (p, x), (dp, dx))[1]  # noqa: E731
    d_loss, (d_y, d_carry) = self._call("jvp", jvp, self.params, self.inputs, d_params, d_x)
    d_y, real = np.asarray(d_y), np.asarray(self.masks)
    bad = [f"outputs ({row} rows)" for row, rows in zip(self.ROWS, np.split(d_y, len(self.ROWS)))
           if not _finite(rows)]
    bad += [] if _finite(d_carry) else ["the carry"]
    # Backpropagation's gradient along the same direction: <dL/dparams, dp> + <dL/dx, dx>.
    grads = self.ran["d_params"], np.concatenate([self.ran["d_x"][r] for r in self.ROWS])
    terms = [np.asarray(g, np.float64) * np.asarray(v, np.float64) for g, v in zip(
        jax.tree.leaves(grads), jax.tree.leaves((d_params, d_x)))]
    reverse, scale = sum(float(t.sum()) for t in terms), sum(float(np.abs(t).sum()) for t in terms)
    gap = abs(float(d_loss) - reverse)
    # Both sum the same products in other orders: rounding relative to the terms' total size
    # (about 1e-8 of it measured in f32 on a CPU; a missing or wrong term is of its own size).
    tolerance = max(1e-5, ROUNDING_SLACK * matmul_roundoff()) * scale
    return not bad and gap <= tolerance, (
        (f"NaN/inf tangents of {', '.join(bad)}" if bad else "all tangents finite") +
        f"; max |dy| {_max_abs(d_y[real]):.3g} at real tokens, "
        f"{_max_abs(d_y[~real]):.3g} at pads; dL along the direction {float(d_loss):.4g}, "
        f"by backpropagation {reverse:.4g} (gap {gap:.2g}, tolerance {tolerance:.2g})")

  def memory(self):
    if self.is_baseline:
      return None, f"the baseline the others are compared with ({BASELINE})"
    ours = train_step_bytes(self.cls, self.settings, self.dim, self.num_heads, MEMORY_T)
    theirs = baseline_bytes(self.dim, self.num_heads, MEMORY_T)
    why = getattr(self.cls, "QUADRATIC", None)
    if why:
      half = train_step_bytes(self.cls, self.settings, self.dim, self.num_heads, MEMORY_T // 2)
      growth = ours / half
      return growth <= QUADRATIC_GROWTH and ours <= QUADRATIC_FACTOR * theirs, (
          f"quadratic by design ({why}): forward+backward grows {growth:.2f}x from "
          f"T={MEMORY_T // 2} to {MEMORY_T} (needs <= {QUADRATIC_GROWTH:g}: no faster than T^2); "
          f"{ours / 2**20:.1f} MiB at T={MEMORY_T}, {ours / theirs:.3f} of {BASELINE}'s (needs "
          f"<= {QUADRATIC_FACTOR:g})")
    return ours < theirs * MEMORY_FRACTION, (
        f"forward+backward at T={MEMORY_T}: {ours / 2**20:.1f} MiB vs {BASELINE} "
        f"{theirs / 2**20:.1f} MiB (ratio {ours / theirs:.3f}, needs < {MEMORY_FRACTION:.3f})")

  @functools.cached_property
  def shape_fails(self) -> bool:
    return self.check("shape").passed is False

  def check(self, name: str, catch: bool = True) -> Result:
    """Runs one property; with `catch`, an exception is a failure that names it, or, raised in
    the mixer's own code (a file of the user's), an error that says where (file:line, the line,
    the exception). Every property but the shape is skipped when the shape fails (or the mixer
    cannot even be traced), and every one after an error of the mixer's own."""
    if self.error is not None:
      return Result(name, None, "skipped until the error above is mended", skipped=True)
    if name != "shape" and self.shape_fails:
      return Result(name, None, "skipped until the shape passes", skipped=True)
    try:
      passed, detail = PROPERTIES[name](self)
    except Exception as e:  # noqa: BLE001 - a user's mixer may raise anything; report it
      if not catch:
        raise
      frame = tracebacks.user_frame(e)
      if frame is not None:
        message = str(e).strip().splitlines()[0] if str(e).strip() else ""
        self.error = (f"{tracebacks.where(frame)}: {type(e).__name__}: {message}"
                      + (f"\n        {frame.line}" if frame.line else ""))
        return Result(name, False, message, error=self.error)
      passed, detail = False, f"raised {type(e).__name__}: {e}"
    return Result(name, None if passed is None else bool(passed), detail)

  def check_all(self) -> list[Result]:
    return [self.check(name) for name in PROPERTIES]


PROPERTIES: dict[str, Callable[[MixerContract], tuple[bool | None, str]]] = {
    "shape": MixerContract.shape,
    "dtype": MixerContract.dtype,
    "finite": MixerContract.finite,
    "padding invariance": MixerContract.padding_invariance,
    "bidirectional": MixerContract.bidirectional,
    "jit": MixerContract.jit,
    "deterministic": MixerContract.deterministic,
    "carry": MixerContract.carry,
    "finite gradients": MixerContract.finite_gradients,
    "forward derivatives": MixerContract.forward_derivatives,
    "memory": MixerContract.memory,
}


# Properties that measure y (or its gradients): once y is not finite they fail for that reason
# alone, with NaN or inf where their numbers would be (`follows_from_finite`).
READ_Y = ("padding invariance", "bidirectional", "jit", "deterministic", "carry",
          "finite gradients", "forward derivatives")
_NOT_FINITE = re.compile(r"\b(nan|inf)\b|NaN/inf", re.IGNORECASE)


def follows_from_finite(finite: Result | None, result: Result) -> bool:
  """Whether `result` fails only because y is not finite (`finite` failed, and the property
  reads y and measured NaN or inf): one cause, reported once rather than as several."""
  return (finite is not None and finite.passed is False and finite.error is None
          and result.name in READ_Y and result.passed is False and result.error is None
          and bool(_NOT_FINITE.search(result.detail)))


def check_shape_before_training(mixer_factory: Callable[..., nn.Module], spec: str, *,
                                dim: int, num_heads: int, length: int) -> None:
  """Raises MixerShapeError, one line, when a mixer's output is not (y of x's shape, carry) at a
  run's sizes (x [1,T,D], T = `length`, also its max_len): before training, where the first
  layer's residual sum would otherwise fail with a broadcasting error. An exception of the
  mixer's own is left to the run, which logs its traceback."""
  module = mixer_factory(dim=dim, num_heads=num_heads, max_len=length)
  try:
    problem = shape_problem(module, (1, length, dim))
  except Exception:  # noqa: BLE001 - reported by the run itself, with its traceback logged
    return
  if problem:
    raise MixerShapeError(f"mixer '{spec}' {problem} (`lra check {spec}` checks the whole "
                          "contract)")


def train_step_bytes(cls: type[nn.Module], settings: dict[str, Any], dim: int,
                     num_heads: int, length: int = MEMORY_T) -> int:
  """Bytes XLA plans for forward + backward of one mixer at T=`length` (compiled, never run)."""
  module = cls(dim=dim, num_heads=num_heads, max_len=length, **settings)
  x = jax.ShapeDtypeStruct((1, length, dim), jnp.float32)
  mask = jax.ShapeDtypeStruct((1, length), jnp.bool_)
  params = jax.eval_shape(lambda a, m: module.init(jax.random.PRNGKey(0), a, m,
                                                   deterministic=True), x, mask)
  loss = lambda p, a, m: jnp.sum(module.apply(p, a, m, deterministic=True)[0] ** 2)
  compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(params, x, mask).compile(
      _compiler_options())
  stats = compiled.memory_analysis()
  return stats.temp_size_in_bytes + stats.argument_size_in_bytes + stats.output_size_in_bytes


@functools.cache
def baseline_bytes(dim: int, num_heads: int, length: int = MEMORY_T) -> int:
  """train_step_bytes of softmax attention, compiled once per process and size."""
  return train_step_bytes(SoftmaxMixer, {}, dim, num_heads, length)
