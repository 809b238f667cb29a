"""raresdolga/latte_transformer's own trainer, driven on our batches from our initial parameters:
the Latte side of `lra bench --against-trainer` (lra.bench.against_trainer).

What runs is the authors' code from the user's clone, unedited: models/tasks.py's Classification
(TextImageEncoder: embedding, sinusoidal positions, TransBlocks around BidLatte, in
models/modules/common_layers.py and latte.py; mean pooling; a linear head), built from config.py's
LRATaskConfig at our config's settings (their experiments/config/listops.yaml for ListOps), and
jax_trainer.py's optimizer (Trainer.prepare_optimizer and get_scheduler: clip_by_global_norm(1.0),
then inject_hyperparams(adamw) at their cosine schedule, weight decay 0.01), TrainState and
train_step. Of the files these need, jax_trainer.py imports torch (its DataLoader) and tqdm, and
models/tasks.py eval_utils/sample.py (language-model sampling, with distrax), none of which these
parts use (experiments/lra.py, with datasets and wandb, is not loaded): while the files load, what
is not installed gets a stand-in (torch's DataLoader, tqdm), `eval_utils.sample` always does, and
`jax.tree_flatten` / `jax.tree_map` (gone from today's JAX) exist. The names their files import
absolutely (`config`, `eval_utils`) point at the clone's files only while they load, under a
private package, so no module of the user's is shadowed. Their code relies on NumPy's rank
promotion ([T, 1] * [D/2] in PositionalEncoding), which a caller may have disallowed: it runs with
it allowed.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import io
import sys
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from lra import errors
from lra.bench.reference_layers import latte_to_bid_latte
from lra.models.encoder import sinusoidal_positions

REPOSITORY = "raresdolga/latte_transformer"
SOURCE = (f"{REPOSITORY}: models/tasks.py (Classification), models/modules/common_layers.py, "
          "models/modules/latte.py (BidLatte), jax_trainer.py (optimizer, schedule, train_step)")
MARKER = "jax_trainer.py"  # what a clone of raresdolga/latte_transformer is recognised by
PACKAGE = "_lra_peer_latte"
# Their trainer's fixed optimizer (jax_trainer.py, Trainer.prepare_optimizer): optax.adamw's
# defaults, weight decay 0.01 whatever the config says, the global norm clipped at 1.0.
THEIR_OPTIMIZER = {"train.b1": 0.9, "train.b2": 0.999, "train.eps": 1e-8,
                   "train.weight_decay": 0.01, "train.grad_clip_norm": 1.0}


# What our loop pads to (data.padding), for the notes.
PADDINGS = {"fixed": "pads every batch to the task's length",
            "batch": "pads each batch to its own longest example",
            "sorted": "sorts each batch's rows by length into micro-batches, each padded to its "
                      "own longest, and sums their gradients (data.padding=sorted)"}


# --- loading their code ------------------------------------------------------------------------

def _stand_in(name: str, **attributes) -> types.ModuleType:
  module = types.ModuleType(name)
  module.__dict__.update(attributes)
  return module


class _NoDataLoader:
  """torch.utils.data.DataLoader where torch is not installed: their Trainer's loaders, which the
  comparison never builds (it feeds our batches)."""

  def __init__(self, *args, **kwargs):
    raise errors.BadValue("the Latte trainer's DataLoader is not available here (no torch)")


def _no_sampling(*args, **kwargs):
  raise NotImplementedError("their language-model sampling is not loaded by lra")


def _absent(name: str) -> bool:
  try:
    return importlib.util.find_spec(name) is None
  except (ImportError, ValueError):
    return True


@contextlib.contextmanager
def _patched(names: Mapping[str, types.ModuleType]) -> Iterator[None]:
  """sys.modules entries that exist only inside the block (earlier entries put back after)."""
  before = {name: sys.modules.get(name) for name in names}
  sys.modules.update(names)
  try:
    yield
  finally:
    for name, module in before.items():
      if module is None:
        sys.modules.pop(name, None)
      else:
        sys.modules[name] = module


@contextlib.contextmanager
def _old_jax() -> Iterator[None]:
  """jax.tree_flatten and jax.tree_map, which their code calls (JAX ~0.4) and today's JAX lacks."""
  added = [name for name, value in (("tree_flatten", jax.tree_util.tree_flatten),
                                    ("tree_map", jax.tree_util.tree_map))
           if not hasattr(jax, name) and setattr(jax, name, value) is None]
  try:
    yield
  finally:
    for name in added:
      delattr(jax, name)


def _package(name: str, path: Path) -> types.ModuleType:
  """A package module over `path` whose __init__.py is never run."""
  package = types.ModuleType(name)
  package.__path__ = [str(path)]
  sys.modules[name] = package
  return package


@functools.cache
def load(clone: Path) -> types.SimpleNamespace:
  """Their config, models.tasks and jax_trainer modules, loaded from the clone under PACKAGE."""
  root = Path(clone)
  missing = [f for f in ("jax_trainer.py", "config.py", "models/tasks.py",
                         "models/modules/common_layers.py", "models/modules/latte.py",
                         "eval_utils/metric_utils.py") if not (root / f).is_file()]
  if missing:
    raise errors.NotFound(f"--against-trainer {clone}: a clone of {REPOSITORY} holds "
                          f"{', '.join(missing)}; this one does not (another repository, or a "
                          "commit before the trainer?)")
  _package(PACKAGE, root)
  for sub in ("models", "models/modules", "eval_utils"):
    _package(f"{PACKAGE}.{sub.replace('/', '.')}", root / sub)
  with _old_jax():
    # config.py reads YAML only in Config.load, which is never called here.
    with _patched({"yaml": _stand_in("yaml")} if _absent("yaml") else {}):
      config = importlib.import_module(f"{PACKAGE}.config")
    metric_utils = importlib.import_module(f"{PACKAGE}.eval_utils.metric_utils")
    sample = _stand_in(f"{PACKAGE}.eval_utils.sample", sample_tok=_no_sampling)
    absolute = {"config": config, "eval_utils": sys.modules[f"{PACKAGE}.eval_utils"],
                "eval_utils.metric_utils": metric_utils, "eval_utils.sample": sample}
    with _patched(absolute):
      tasks = importlib.import_module(f"{PACKAGE}.models.tasks")
    third_party = {}
    if _absent("torch"):
      third_party.update({
          "torch": _stand_in("torch"), "torch.utils": _stand_in("torch.utils"),
          "torch.utils.data": _stand_in("torch.utils.data", DataLoader=_NoDataLoader)})
    if _absent("tqdm"):
      third_party.update({"tqdm": _stand_in("tqdm"), "tqdm.auto": _stand_in(
          "tqdm.auto", tqdm=lambda iterable=None, *a, **k: iterable)})
    with _patched(third_party):
      trainer = importlib.import_module(f"{PACKAGE}.jax_trainer")
  return types.SimpleNamespace(config=config, tasks=tasks, trainer=trainer,
                               metric_utils=metric_utils)


# --- what their Classification can build --------------------------------------------------------

def unbuildable(config: ml_collections.ConfigDict, spec) -> list[str]:
  """Our settings that their Classification (TransBlock, BidLatte, LayerNorm, one sequence of
  tokens) does not build, as 'key=value (theirs: ...)'; [] when it builds our model."""
  m, latte = config.model, config.mixers.latte
  wanted = [
      ("model.mixer", m.mixer, "latte", "BidLatte"),
      ("mixers.latte.vapor", latte.vapor, False, "no VAPOR"),
      ("mixers.latte.bias", latte.bias, False, "no biases"),
      ("model.block", m.block, "prenorm", "TransBlock, prenorm=True"),
      ("model.norm", m.norm, "block", "LayerNorm, batchnorm=False"),
      ("model.final_norm", m.final_norm, False, "no norm before pooling"),
      ("model.head", m.head, "linear", "one Dense layer"),
      ("model.mlp_dim", m.mlp_dim, 4 * m.dim, "4 hidden_dim"),
      ("model.mlp_hidden_dropout", m.mlp_hidden_dropout, False, "dropout after the MLP only"),
      ("model.mixer_gate", m.mixer_gate, False, "none"),
      ("model.embedding", m.embedding, "token", "nn.Embed"),
      ("model.pos_encoding", m.pos_encoding, "sinusoidal", "PositionalEncoding"),
      ("model.patch", m.patch, 1, "one token per id"),
      ("model.dtype", m.dtype, "float32", "float32"),
      ("train.schedule", config.train.schedule, "cosine", "lr_decay_fn=cosine"),
  ]
  out = [f"{key}={value!r} (theirs: {what})" for key, value, theirs, what in wanted
         if value != theirs]
  if m.pooling not in ("mean", "last"):
    out.append(f"model.pooling={m.pooling!r} (theirs: mean or last)")
  if spec.dual or spec.pad_id is None:
    out.append("a task of pairs or pixels (theirs here: Classification of one token sequence)")
  return out


def optimizer_differences(config: ml_collections.ConfigDict) -> list[str]:
  """Where our config's optimizer differs from what their trainer fixes (THEIR_OPTIMIZER): the
  comparison then parts by design."""
  t = config.train
  ours = {"train.b1": t.b1, "train.b2": t.b2, "train.eps": t.eps,
          "train.weight_decay": t.weight_decay, "train.grad_clip_norm": t.grad_clip_norm}
  return [f"{key}={ours[key]:g} (their jax_trainer.py: {value:g})"
          for key, value in THEIR_OPTIMIZER.items() if not np.isclose(ours[key], value)]


def their_settings(config: ml_collections.ConfigDict, spec) -> dict[str, Any]:
  """LRATaskConfig's fields at our config's settings (experiments/config/listops.yaml's keys),
  dropout off: the comparison compares the maths."""
  m, t = config.model, config.train
  # Their positions table must cover the longest batch we pad to (the task's T, rounded up).
  quantum = config.data.pad_quantum
  longest = -(-spec.seq_len // quantum) * quantum if config.data.padding != "fixed" else 0
  return dict(
      name="lra-bench", base_dir=".", dataset_name=config.task, lr=t.learning_rate,
      lr_decay_fn="cosine", batch_size=t.batch_size, train_steps=t.num_steps,
      warmup_pc=t.warmup_steps / t.num_steps, weight_decay=t.weight_decay,
      grad_accumulation_steps=1, pool=m.pooling, dropout=0.0, attention_type="bid_latte",
      block_type="transformer", batchnorm=False, prenorm=True, hidden_dim=m.dim,
      nlayers=m.num_layers, nheads=m.num_heads, L=config.mixers.latte.num_latents, unroll=100,
      max_seq_len=max(spec.seq_len, longest), num_classes=spec.num_classes, eval_steps=1,
      conv_embed=False, wandb_log=False)


# --- our variables <-> their trees (entries re-arranged only) ----------------------------------

def theirs_of_params(ours: Mapping[str, Any], num_layers: int, num_heads: int,
                     num_latents: int) -> dict[str, Any]:
  """Our Classifier's parameters -> their Classification's (names as Flax gives them there)."""
  encoder = ours["encoder"]
  theirs = {"Embed_0": dict(encoder["embed"])}
  for i in range(num_layers):
    block = encoder[f"block_{i}"]
    theirs[f"TransBlock_{i}"] = {
        "LayerNorm_0": dict(block["mixer_norm"]), "LayerNorm_1": dict(block["mlp_norm"]),
        "BidLatte_0": latte_to_bid_latte(block["mixer"], num_heads, num_latents),
        "Dense_0": dict(block["mlp"]["Dense_0"]), "Dense_1": dict(block["mlp"]["Dense_1"])}
  return {"encoder": theirs, "_head": dict(ours["head_out"])}


def ours_of_params(theirs: Mapping[str, Any], num_layers: int, num_heads: int,
                   num_latents: int) -> dict[str, Any]:
  """The inverse of theirs_of_params: their Classification's parameters in our names."""
  encoder = theirs["encoder"]
  ours = {"embed": dict(encoder["Embed_0"])}
  for i in range(num_layers):
    block = encoder[f"TransBlock_{i}"]
    latte = block["BidLatte_0"]
    dim = latte["Wv"].shape[0]
    head = lambda w: jnp.reshape(w, (dim, num_heads, -1))  # noqa: E731 - [D,H*k] -> [D,H,k]
    ours[f"block_{i}"] = {
        "mixer_norm": dict(block["LayerNorm_0"]), "mlp_norm": dict(block["LayerNorm_1"]),
        "mixer": {"qkv": {"kernel": jnp.concatenate(
            [head(latte["Wq"]), head(latte["Wk"]), head(latte["Wv"])], axis=-1)},
                  "out": {"kernel": jnp.reshape(latte["o_proj"], (num_heads, -1, dim))}},
        "mlp": {"Dense_0": dict(block["Dense_0"]), "Dense_1": dict(block["Dense_1"])}}
  return {"encoder": ours, "head_out": dict(theirs["_head"])}


def position_difference(code: types.SimpleNamespace, length: int, dim: int) -> float:
  """The largest |ours - theirs| of the position tables: theirs (common_layers.py
  PositionalEncoding, run here) is computed in float32, ours in float64 and rounded
  (models/encoder.py)."""
  layers = sys.modules[code.tasks.__package__ + ".modules.common_layers"]
  zeros = jnp.zeros((1, length, dim), jnp.float32)
  with jax.numpy_rank_promotion("allow"):
    theirs = layers.PositionalEncoding(d_model=dim, max_len=length).apply(
        {}, jnp.zeros((1, length), jnp.int32), zeros)[0]
  return float(np.max(np.abs(np.asarray(theirs) - sinusoidal_positions(length, dim))))


class LatteTrainer:
  """The Latte authors' Classification, optimizer and train_step at one of our configs' settings
  (their ListOps setup: TransBlock around BidLatte, prenorm LayerNorm, mean pooling, linear head;
  the `paper` and `latte_code` presets of one-sequence token tasks)."""

  name = "Latte"
  source = SOURCE

  def __init__(self, clone: Path, config: ml_collections.ConfigDict, spec):
    bad = unbuildable(config, spec)
    if bad:
      raise errors.BadValue("lra bench --against-trainer with the Latte authors' clone builds "
                            "their Classification, which differs from this config in: "
                            f"{'; '.join(bad)}. Pass a preset of a token task that builds it, "
                            "e.g. --task listops --preset latte_code")
    self.config, self.spec = config, spec
    m = config.model
    self.sizes = dict(num_layers=m.num_layers, num_heads=m.num_heads,
                      num_latents=config.mixers.latte.num_latents)
    code = self.code = load(Path(clone))
    settings = their_settings(config, spec)
    self.their_config = code.config.LRATaskConfig(**settings)
    self.model = code.tasks.Classification(self.their_config, vocab_size=spec.vocab_size,
                                           pad_id=spec.pad_id)
    # Their Trainer's own methods on a Trainer made without __init__ (which builds torch
    # loaders, an orbax manager and an output folder): prepare_optimizer (with get_scheduler)
    # and init_train_state.
    trainer = code.trainer.Trainer.__new__(code.trainer.Trainer)
    trainer.config, trainer.model = self.their_config, self.model
    # Read for its length only without train_steps or eval_steps, both set here.
    trainer.train_data = range(config.train.num_steps * config.train.batch_size)
    trainer.eval_steps = settings["eval_steps"]
    example = {"input_ids": np.full((1, 8), 1, np.int32), "labels": np.zeros((1,), np.int32)}
    trainer.train_dl = [example]
    with _old_jax(), jax.numpy_rank_promotion("allow"), contextlib.redirect_stdout(
        io.StringIO()):  # it prints its setup
      trainer._optimizer, self.total_steps = trainer.prepare_optimizer()
      self.state = trainer.init_train_state(jax.random.PRNGKey(0))
    self.schedule = trainer.lr_scheduler
    self._train_step = jax.jit(code.trainer.train_step, static_argnums=(3,))
    self._rng = jax.random.PRNGKey(0)
    self._rates: dict[int, dict[str, float]] = {}
    self.notes = self._notes()
    # BidLatte's stability max runs over every position, pads too, and is not held constant
    # (models/modules/latte.py: `maxi = jnp.max(K, axis=0, keepdims=True)`, no stop_gradient):
    # the logits of a pad that holds the max get the max's gradient, zero but for rounding
    # (the weights do not move with a shift), which Adam, dividing by |g| + 1e-8, turns into
    # steps of a few hundredths of the rate. The pad's row of the embedding so trains in theirs
    # and only decays in ours (our max holds no gradient and skips pads), while neither model
    # lets a pad reach a real output.
    self.inert = {"encoder/Embed_0/pad_row": (
        f"the pad token's embedding row (id {spec.pad_id}): it trains on rounding noise in "
        "theirs, through BidLatte's max over every position, pads included, with no "
        "stop_gradient (models/modules/latte.py `maxi`), and only decays in ours")}

  def _compared(self, params: Mapping[str, Any]) -> dict[str, Any]:
    """Their parameters with the pad token's embedding row as a tensor of its own (`inert`)."""
    table = np.asarray(params["encoder"]["Embed_0"]["embedding"])
    pad = self.spec.pad_id
    embed = {"embedding": np.delete(table, pad, axis=0), "pad_row": table[pad]}
    return {**params, "encoder": {**params["encoder"], "Embed_0": embed}}

  def theirs_of(self, variables: Mapping[str, Any]) -> dict[str, Any]:
    """Our variables in their names, for the comparison (the pad row apart)."""
    return {"params": self._compared(theirs_of_params(variables["params"], **self.sizes))}

  def start(self, variables: Mapping[str, Any]) -> None:
    """Our initial parameters become their state's; its optimizer state starts afresh on them."""
    theirs = theirs_of_params(variables["params"], **self.sizes)
    same = lambda ref, new: jnp.asarray(new, ref.dtype).reshape(ref.shape)  # noqa: E731
    params = jax.tree.map(same, dict(self.state.params), theirs)
    self.state = self.state.replace(params=params, opt_state=self.state.tx.init(params))

  def variables(self) -> dict[str, Any]:
    return {"params": self._compared(jax.device_get(self.state.params))}

  def rates(self, step: int) -> dict[str, float]:
    return self._rates[step]

  def step(self, batch: dict[str, np.ndarray], step: int) -> float:
    """One of their updates on our batch (their Trainer._train: a key split per step)."""
    self._rng, model_rng = jax.random.split(self._rng)
    # Every example padded to max_seq_len, as their data pipeline pads (one program to compile).
    inputs = np.asarray(batch["inputs"], np.int32)
    inputs = np.pad(inputs, [(0, 0), (0, self.their_config.max_seq_len - inputs.shape[1])],
                    constant_values=self.spec.pad_id)
    with jax.numpy_rank_promotion("allow"):
      self.state, loss = self._train_step(
          model_rng, self.state, (jnp.asarray(inputs), jnp.asarray(batch["label"], jnp.int32)),
          False)
    # What their trainer logs as the rate (the injected hyperparameter of this update).
    injected = self.state.opt_state[1].hyperparams["learning_rate"]
    self._rates[step] = {"learning_rate": float(injected)}
    return float(loss)

  def _notes(self) -> list[str]:
    """What the step-by-step comparison does not see, each with its source in their code."""
    c, length = self.config, self.their_config.max_seq_len
    positions = position_difference(self.code, length, c.model.dim)
    notes = [f"optimizer: {d}" for d in optimizer_differences(c)]
    notes += [
        "batches: theirs are drawn by torch's DataLoader(shuffle=True) over the whole training "
        "set, the last short batch kept (jax_trainer.py); ours are a seeded permutation per "
        "epoch, the remainder dropped: the same distribution of batches, other draws (and no "
        "short batch where the batch divides the set). The comparison feeds both our batches.",
        f"padding: theirs pads every example to max_seq_len={length} (preproc/lra_dp.py "
        f"ListOpsDP.tokenize; the comparison pads our batch so); ours {PADDINGS[c.data.padding]}."
        " Pads reach no real output in either, except that BidLatte's stability max runs over "
        "pads too (models/modules/latte.py, `maxi`), ours over real tokens only: the same values "
        "unless a pad's key logit exceeds every real one's by more than ~87, when their real "
        "weights underflow.",
        f"positions: their table is computed in float32 (common_layers.py PositionalEncoding), "
        f"ours in float64 and rounded: at most {positions:.1e} "
        f"apart over {length} positions.",
        "head: nn.Dense(dtype=jnp.float64) (models/tasks.py) computes in float32, as ours, "
        "unless JAX runs with jax_enable_x64, which their code never sets.",
        "dropout: off in the comparison; on, both drop after embedding + positions, after the "
        "mixer and after the MLP's second layer, none inside BidLatte or on the MLP's hidden "
        "units (common_layers.py TransBlock, TextImageEncoder); the masks differ (theirs from a "
        "key split per step, jax_trainer.py _train).",
        "evaluation: theirs evaluates after steps 1, 1 + E, 1 + 2E, ... (E = one epoch; "
        "`it % eval_steps == 0` after step it + 1) on batches of the training batch size padded "
        f"to {length}, and averages per-batch means (a short last batch weighs as a full one); "
        "ours after steps E, 2E, ..., per example, over whole splits.",
        "tokens: their ListOpsTokenizer's ids come from a mapping file the repository does not "
        "hold (experiments/config/listops.yaml `tokenizer_path`), with `]` read as `X` and "
        "parentheses dropped (preproc/lra_dp.py google_clean); ours are a fixed vocabulary, "
        "parentheses dropped: the same symbols under other ids, i.e. the embedding's rows in "
        "another order, drawn i.i.d. either way.",
        "initialisation: the comparison starts both from ours; theirs draws the same "
        "distributions (lecun_normal with fan-in D for Wq, Wk, Wv and o_proj, as our fused "
        "maps; Flax's defaults for the embedding, LayerNorms and Dense layers).",
    ]
    return notes
