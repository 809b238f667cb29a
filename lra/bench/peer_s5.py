"""lindermanlab/S5's own trainer, driven on our batches from our initial parameters: the S5 side of
`lra bench --against-trainer` (lra.bench.against_trainer).

What runs is S5's code from the user's clone, unedited: `s5/seq_model.py`'s
BatchClassificationModel, `s5/train_helpers.py`'s create_train_state (its optimizer groups) and
train_step, and its learning rates as `s5/train.py` sets them step by step. Three stand-ins let
that code load on today's JAX and Flax (each only while S5's code needs it): `jax.numpy.
DeviceArray` (an annotation), `jax.tree_leaves` (a parameter count it prints) and Flax's
FrozenDict returns (create_train_state calls `.unfreeze()`); `tqdm` gets a pass-through stand-in
where it is not installed.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import sys
import types
from pathlib import Path
from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from lra import errors
from lra.bench.reference_layers import _load_file
from lra.models.encoder import token_values
from lra.models.mixers import s5_init

SOURCE = "lindermanlab/S5: s5/seq_model.py, s5/train_helpers.py, s5/train.py's per-step rates"
MARKER = "s5/train_helpers.py"  # what a clone of lindermanlab/S5 is recognised by
# S5's optimizer groups (train_helpers.create_train_state) by the names each trains apart, with
# dt_global (log_step in the regular group): our `ssm_params` setting names the same sets.
OPT_CONFIGS = {
    frozenset({"B", "Lambda_re", "Lambda_im", "log_step"}): ("standard", False),
    frozenset({"B", "Lambda_re", "Lambda_im"}): ("standard", True),
    frozenset({"Lambda_re", "Lambda_im", "log_step"}): ("BfastandCdecay", False),
    frozenset({"Lambda_re", "Lambda_im"}): ("BfastandCdecay", True),
}


@contextlib.contextmanager
def _stand_ins():
  """What S5's code (JAX ~0.4, Flax ~0.6) reads that today's JAX and Flax no longer have."""
  added = [name for name, holder, value in (("DeviceArray", jnp, jax.Array),
                                             ("tree_leaves", jax, jax.tree_util.tree_leaves))
           if not hasattr(holder, name) and setattr(holder, name, value) is None]
  tqdm = None
  if importlib.util.find_spec("tqdm") is None and "tqdm" not in sys.modules:
    tqdm = sys.modules["tqdm"] = types.ModuleType("tqdm")
    tqdm.tqdm = lambda iterable, *a, **k: iterable
  try:
    with flax.config.temp_flip_flag("return_frozendict", True):
      yield
  finally:
    for name in added:
      delattr(jnp if name == "DeviceArray" else jax, name)
    if tqdm is not None:
      del sys.modules["tqdm"]


@functools.cache
def load(clone: Path) -> types.ModuleType:
  """S5's `s5` package from the clone under a private name (no `s5` of the user's is shadowed and
  s5/__init__.py is never run), with the modules the trainer needs."""
  root = Path(clone) / "s5"
  package = types.ModuleType("_lra_peer_s5")
  package.__path__ = [str(root)]
  sys.modules[package.__name__] = package
  with _stand_ins():
    for name in ("ssm_init", "ssm", "layers", "seq_model", "train_helpers"):
      setattr(package, name, _load_file(f"{package.__name__}.{name}", root / f"{name}.py",
                                        package.__name__))
  return package


class S5Trainer:
  """S5's model, optimizer and train step at one of our configs' settings (its S5 block:
  `model.block=s5`, BatchNorm or LayerNorm, mean pooling, our published presets)."""

  name = "S5"
  source = SOURCE

  def __init__(self, clone: Path, config: ml_collections.ConfigDict, spec, dropout: float = 0.0):
    m, s5 = config.model, config.mixers.s5
    if m.block != "s5" or m.pooling != "mean" or spec.dual:
      raise errors.BadValue("lra bench --against-trainer with S5's clone compares S5's own block "
                            "(model.block=s5, mean pooling, one sequence): pass a preset that "
                            "builds it, e.g. --preset published or squares_published")
    names = frozenset(n.strip() for n in s5.ssm_params.split(",") if n.strip())
    if names not in OPT_CONFIGS:
      raise errors.BadValue(f"mixers.s5.ssm_params={s5.ssm_params!r} is none of S5's optimizer "
                            f"groups ({'; '.join(','.join(sorted(k)) for k in OPT_CONFIGS)})")
    opt_config, dt_global = OPT_CONFIGS[names]
    # Pixels: S5's loaders give values, its encoder a Dense layer, as ours. Tokens: S5 reads
    # one-hot vectors through a Dense layer (our embedding table is its kernel; it has a bias
    # ours lacks) and is told each sequence's length (`padded`): it pools over real tokens only,
    # but scans and normalises the pads, which ours never lets reach a real token.
    self.pixels, self.vocab = m.embedding == "dense", spec.vocab_size
    self.notes = [] if self.pixels else [
        "S5's token model reads each pad as the one-hot id 0 through its encoder's Dense layer "
        "(bias included), scans those inputs in both directions and normalises them in "
        "BatchNorm; it is told each sequence's length for its pooling only (s5/seq_model.py, "
        "s5/layers.py, s5/ssm.py). Ours enters pads as zeros and keeps them from every real "
        "token (the mixer contract): on any batch with pads the two differ from the first step, "
        "by design of the suite, not by a defect of either trainer."]
    self.patch, self.config = m.patch, config
    code = load(Path(clone))
    lam, v, v_inv = s5_init.block_diagonal_init(s5.state_size, s5.blocks)
    ssm = code.ssm.init_S5SSM(
        H=m.dim, P=s5.state_size // 2, Lambda_re_init=lam.real, Lambda_im_init=lam.imag, V=v,
        Vinv=v_inv, C_init=s5.c_init, discretization="zoh", dt_min=s5.dt_min, dt_max=s5.dt_max,
        conj_sym=True, clip_eigs=bool(s5.clip_eigs), bidirectional=True)
    self.model_cls = functools.partial(
        code.seq_model.BatchClassificationModel, ssm=ssm, d_output=spec.num_classes,
        d_model=m.dim, n_layers=m.num_layers, padded=not self.pixels, activation=m.s5_gate,
        dropout=dropout, mode="pool", prenorm=True, batchnorm=m.norm == "batch",
        bn_momentum=m.bn_momentum)
    self.seq_len = spec.seq_len // m.patch ** 2
    self.in_dim = m.patch ** 2 if self.pixels else spec.vocab_size
    t = config.train
    with _stand_ins(), contextlib.redirect_stdout(io.StringIO()):  # it prints its setup
      self.state = code.train_helpers.create_train_state(
          self.model_cls, jax.random.PRNGKey(0), not self.pixels, False, in_dim=self.in_dim,
          bsz=t.batch_size, seq_len=self.seq_len, weight_decay=t.weight_decay,
          batchnorm=m.norm == "batch", opt_config=opt_config,
          ssm_lr=t.ssm_learning_rate or t.learning_rate, lr=t.learning_rate,
          dt_global=dt_global)
    self.code, self.opt_config = code.train_helpers, opt_config
    self.batchnorm, self._model = m.norm == "batch", self.model_cls(training=True)
    self._count, self._rates = 0, {}

  # --- our variables <-> S5's trees (entries re-arranged only) ---------------------------------
  def theirs_of(self, variables: dict[str, Any]) -> dict[str, Any]:
    """Our variables {"params", "batch_stats"} in S5's names and shapes."""
    ours = flax.core.unfreeze(variables["params"])
    embed = ours["encoder"]["embed"]
    if not self.pixels:  # a table row per token = a kernel row per one-hot input; no bias here
      table = embed["embedding"]
      embed = {"kernel": table, "bias": jnp.zeros(table.shape[1], table.dtype)}
    params = {"encoder": {"encoder": embed}, "decoder": ours["head_out"]}
    stats = {"encoder": {}}
    for i in range(self.config.model.num_layers):
      block = ours["encoder"][f"block_{i}"]
      mixer = block["mixer"]
      params["encoder"][f"layers_{i}"] = {
          "norm": block["mixer_norm"], "out2": block["gate"],
          "seq": {**{k: mixer[k] for k in ("Lambda_re", "Lambda_im", "B", "C1", "C2", "D")},
                  "log_step": mixer["log_step"][:, None]}}
      if self.batchnorm:
        stats["encoder"][f"layers_{i}"] = {
            "norm": flax.core.unfreeze(variables["batch_stats"])["encoder"][f"block_{i}"][
                "mixer_norm"]}
    return {"params": params, **({"batch_stats": stats} if self.batchnorm else {})}

  def start(self, variables: dict[str, Any]) -> None:
    """Our initial variables become S5's state; its optimizer state starts afresh on them."""
    theirs = self.theirs_of(variables)
    same = lambda ref, new: jnp.asarray(  # noqa: E731
        new, jax.dtypes.canonicalize_dtype(ref.dtype)).reshape(ref.shape)
    params = jax.tree.map(same, flax.core.unfreeze(self.state.params), theirs["params"])
    self.state = self.state.replace(params=params, opt_state=self.state.tx.init(params))
    if self.batchnorm:
      self.state = self.state.replace(batch_stats=jax.tree.map(
          same, flax.core.unfreeze(self.state.batch_stats), theirs["batch_stats"]))

  def variables(self) -> dict[str, Any]:
    return {"params": self.state.params,
            **({"batch_stats": self.state.batch_stats} if self.batchnorm else {})}

  def rates(self, step: int) -> dict[str, float]:
    return self._rates[step]

  def _next_rates(self, step: int) -> None:
    """s5/train.py's learning rates after step `step`: create_train_state injected the peak
    rates for step 0; after each step train_epoch sets the next one's from the step count
    (update_learning_rate_per_step), with linear_warmup over the warm-up epochs and then
    cosine_annealing over the rest, the count carrying on (train.py's loop, by epochs; our
    warm-up is whole epochs in every published preset)."""
    t, h = self.config.train, self.code
    warm = step < t.warmup_steps
    decay, end = ((h.linear_warmup, t.warmup_steps) if warm else
                  (h.cosine_annealing, t.num_steps - t.warmup_steps))
    params = (decay, t.ssm_learning_rate or t.learning_rate, t.learning_rate, step, end,
              self.opt_config, 0.0)  # run_train.py's lr_min default
    self.state, _ = h.update_learning_rate_per_step(params, self.state)

  def step(self, batch: dict[str, np.ndarray], step: int,
           rates: tuple[float, float] | None = None) -> float:
    """One of S5's updates on our batch, at the rates its trainer set for it (or at `rates`,
    (learning rate, SSM learning rate), for a study of another schedule)."""
    if step != self._count:
      raise ValueError(f"S5's trainer sets each step's rates after the one before: step {step} "
                       f"asked for after {self._count}")
    inner = self.state.opt_state.inner_states
    for group, rate in zip(("regular", "ssm"), rates or ()):
      inner[group].inner_state.hyperparams["learning_rate"] = jnp.asarray(rate, jnp.float32)
    self._rates[step] = {name: float(inner[group].inner_state.hyperparams["learning_rate"])
                         for name, group in (("learning_rate", "regular"),
                                             ("ssm_learning_rate", "ssm"))}
    rows = len(batch["label"])
    if self.pixels:
      # S5's Pathfinder loader: ToTensor and Normalize(0.5, 0.5), pixel / 127.5 - 1, as our dense
      # embedding reads pixels; squares as our encoder cuts them.
      pixels = jnp.asarray(batch["inputs"], jnp.float32) / 127.5 - 1.0
      inputs = token_values(pixels, self.patch).reshape(rows, self.seq_len, self.in_dim)
    else:  # its prep_batch: one-hot ids, and the lengths beside them
      inputs = (jax.nn.one_hot(batch["inputs"], self.vocab),
                jnp.asarray(np.sum(batch["mask"], axis=1), jnp.float32))
    with jax.numpy_rank_promotion("allow"):
      self.state, loss = self.code.train_step(
          self.state, jax.random.PRNGKey(step), inputs, jnp.asarray(batch["label"], jnp.float32),
          jnp.ones((rows, self.seq_len)), self._model, self.batchnorm)
    self._next_rates(step)
    self._count += 1
    return float(loss)

  def accuracy(self, inputs: jax.Array, labels: np.ndarray, batch_size: int = 32) -> float:
    """S5's own `validate` (running statistics, its eval step) on inputs already as it reads
    them ([N, T, in_dim]) in batches of `batch_size`."""
    class _Tensor:  # what its prep_batch asks of a torch tensor
      def __init__(self, value):
        self.value = value

      def numpy(self):
        return np.asarray(self.value)
    batches = [(_Tensor(inputs[i:i + batch_size]), _Tensor(labels[i:i + batch_size]))
               for i in range(0, len(labels), batch_size)]
    with jax.numpy_rank_promotion("allow"):
      _, accuracy = self.code.validate(self.state, self.model_cls, batches, self.seq_len,
                                       self.in_dim, self.batchnorm)
    return float(accuracy)
