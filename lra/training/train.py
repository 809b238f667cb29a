"""The one train loop: any task, any mixer, one device or many (jit over a 1-D `data` mesh).

`train_and_evaluate(config, data, run_dir)` runs four phases, each a function below:
  1. `setup`: the mesh, the model (lra.models.build), the optimizer and the jitted steps;
  2. `restore_or_init`: a fresh state, or the run's latest checkpoint. Resume order: the latest
     saved step wins; the data order and the dropout masks are functions of (seed, step), so the
     state and a little bookkeeping (`Book`) are all a resumed run needs to continue exactly;
  3. `_loop`: train steps; at log points the train metrics, at eval points val and test, at
     checkpoint points a save; a stop request (Ctrl-C, SIGTERM) saves and returns; a lost peer
     process or a failed checkpoint write records `interrupted` and raises; any other error
     records `failed`, writes its traceback to error.log and raises RunFailed (one line);
  4. `RunFiles.final`: final.json with the status, both reported statistics and provenance.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax.training.train_state import TrainState
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec as P

from lra import errors
from lra.base import tracebacks
from lra.machine import distributed, interrupts, memory
from lra.runs import checkpoints, writers
from lra.training import dropout_rng, init_from, objectives, optim
from lra.machine import stop_after
from lra.runs import run_identity
from lra.runs.config_loading import mixer_label
from lra.runs.loggers import open_loggers
from lra.models.build import build_model, execution_path, mixer_factory, tokens_seen
from lra.models.mixers import contract
from lra.tasks.contract.batches import Batching, eval_batches, step_batches
from lra.tasks.contract.cache import PreparedData
from lra.base.progress import Steps, Throughput
from lra.tasks.contract.spec import TaskSpec

# (step count after it, its micro-batches, the new state, its sums) -> stop now?
StepObserver = Callable[[int, Sequence[Mapping[str, np.ndarray]], TrainState, dict], bool]


def example_batch(spec: TaskSpec, batch_size: int, *, noise: bool = False
                  ) -> dict[str, np.ndarray]:
  """Zeros shaped like a batch of this task (for `model.init`); `noise`: with the noise a
  denoising batch carries (lra.training.objectives)."""
  keys = ("1", "2") if spec.dual else ("",)
  batch = {"weight": np.ones((batch_size,), np.float32)}
  for k in keys:
    batch["inputs" + k] = np.zeros((batch_size, spec.seq_len), np.int32)
    batch["mask" + k] = np.ones((batch_size, spec.seq_len), bool)
    if noise:
      batch["noise" + k] = np.zeros((batch_size, spec.seq_len), np.float32)
  return batch


def make_steps(model: nn.Module, mesh: jax.sharding.Mesh, dropout_seed: int,
               dropout_bits: str = "threefry",
               objective: objectives.Objective = objectives.CLASSIFY) -> tuple[TrainStep, Callable]:
  """Jitted train and eval steps: batches sharded over `data`, state replicated; the loss and
  metric sums are `objective`'s (classification, or denoising for self-pretraining).

  The train step takes a step's batch as a sequence of k micro-batches (lra.tasks.contract.
  batches.step_batches) and makes one update from their summed gradient: the same update as the
  whole batch at once, in 1/k of the activation memory, and with sorted padding at each
  micro-batch's own length. `dropout_bits` names where dropout's random bits come from
  (lra/training/dropout_rng.py).

  A batch may carry `stop[B]` (int32, each process's rows set to whether it was asked to stop):
  the step then also returns `sums["stop"]`, its maximum over every process. The flag rides on
  the step's own all-reduce, so all processes learn of a stop request at the same step.
  """
  replicated = NamedSharding(mesh, P())
  base_key = dropout_rng.key(dropout_seed, dropout_bits)

  def grads_and_sums(params, batch, key, stats=None):
    def loss_fn(params):
      if stats is None:
        output = model.apply({"params": params}, batch, deterministic=False,
                             rngs={"dropout": key})
        new_stats = None
      else:  # BatchNorm: this batch's statistics normalise it and update the running ones
        output, updated = model.apply({"params": params, "batch_stats": stats}, batch,
                                      deterministic=False, rngs={"dropout": key},
                                      mutable=["batch_stats"])
        new_stats = updated["batch_stats"]
      sums = objective.sums(output, batch)
      return sums["loss_sum"], (sums, new_stats)
    batch = dict(batch)
    stop = batch.pop("stop", None)
    (_, (sums, new_stats)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    if stop is not None:
      sums["stop"] = jnp.max(stop)
    return grads, sums, new_stats

  def update(state: TrainState, grads, sums):
    # Gradient of the mean loss over the whole batch's real rows.
    grads = jax.tree.map(lambda g: g / jnp.maximum(sums["count"], 1.0), grads)
    sums = dict(sums, grad_norm=optax.global_norm(grads))
    return state.apply_gradients(grads=grads), sums

  def whole_step(state: TrainState, batch):
    # Dropout depends on (seed, step) only: a resumed run draws the same masks.
    key = jax.random.fold_in(base_key, state.step)
    stats = getattr(state, "batch_stats", None)  # BatchNorm's (setup refuses micro-batches)
    grads, sums, stats = grads_and_sums(state.params, batch, key, stats)
    state, sums = update(state, grads, sums)
    return (state if stats is None else state.replace(batch_stats=stats)), sums

  def accumulate(total, params, batch, step, index):
    # Micro-batch `index` of step `step` draws its own dropout masks: (seed, step, index).
    key = jax.random.fold_in(jax.random.fold_in(base_key, step), index)
    grads, sums, _ = grads_and_sums(params, batch, key)
    return (jax.tree.map(jnp.add, total[0], grads),
            {k: (jnp.maximum if k == "stop" else jnp.add)(total[1][k], v) for k, v in sums.items()})

  def zeros(params, stop: bool):
    sums = {k: jnp.zeros((), jnp.float32) for k in ("loss_sum", "correct_sum", "count")}
    if stop:
      sums["stop"] = jnp.zeros((), jnp.int32)
    return jax.tree.map(jnp.zeros_like, params), sums

  def eval_step(state: TrainState, batch):
    output = model.apply(model_variables(state), batch, deterministic=True)
    more = objective.held_out(output, batch) if objective.held_out else {}
    return {**objective.sums(output, batch), **more}

  train_step = TrainStep(
      whole=jax.jit(whole_step, out_shardings=(replicated, replicated), donate_argnums=0),
      zeros=jax.jit(zeros, static_argnums=1, out_shardings=replicated),
      accumulate=jax.jit(accumulate, out_shardings=replicated, donate_argnums=0),
      # The summed gradient is not donated: no output has its place (the state's are taken).
      update=jax.jit(lambda state, total: update(state, *total),
                     out_shardings=(replicated, replicated), donate_argnums=0))
  return train_step, jax.jit(eval_step, out_shardings=replicated)


@dataclasses.dataclass(frozen=True)
class TrainStep:
  """One optimizer update from a step's micro-batches (each a dict of global arrays).

  One micro-batch runs `whole`, a single program (what every run without micro-batches ran).
  k > 1 run `accumulate` once per micro-batch, each at its own shape (one compiled program per
  micro-batch length: at most ceil(T / pad_quantum)), adding gradients and loss sums on the
  device, then `update` divides by the whole batch's real-row count and applies the optimizer:
  weights by real examples, so the update is the whole batch's up to float summation order.
  The host only queues programs; nothing is fetched between them.
  """
  whole: Any
  zeros: Any
  accumulate: Any
  update: Any

  def __call__(self, state: TrainState, micro: Sequence[Mapping[str, jax.Array]]):
    if len(micro) == 1:
      return self.whole(state, micro[0])
    total = self.zeros(state.params, "stop" in micro[0])
    for index, batch in enumerate(micro):
      total = self.accumulate(total, state.params, batch, state.step, np.int32(index))
    return self.update(state, total)

  def lower(self, state: TrainState, batch: Mapping[str, Any]):
    """The one-program step of a whole batch, lowered (for its cost and memory analyses)."""
    return self.whole.lower(state, batch)

  def micro_bytes(self, state: TrainState, batch: Mapping[str, Any]) -> int | None:
    """XLA's estimate of a device's bytes while one micro-batch shaped as `batch` accumulates:
    the accumulating program's, plus the optimizer state it keeps alive (not its argument)."""
    total = jax.eval_shape(self.zeros, state.params, "stop" in batch)
    compiled = self.accumulate.lower(total, state.params, batch, state.step,
                                     np.int32(0)).compile()
    need = memory.step_bytes(compiled)
    if need is None:
      return None
    return need + sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(state.opt_state))


class BatchPlacer:
  """Turns this process's rows of a batch into global arrays sharded over `data`."""

  def __init__(self, mesh: jax.sharding.Mesh):
    self.sharding = distributed.batch_sharding(mesh)

  def rows(self, global_rows: int) -> tuple[int, int]:
    return distributed.local_rows(self.sharding, global_rows)

  def __call__(self, local: dict[str, np.ndarray], global_rows: int) -> dict[str, jax.Array]:
    return distributed.global_batch(local, self.sharding, global_rows)


# ---------------------------------------------------------------------------------------------
# 1. Setup: devices, model, optimizer, steps.

@dataclasses.dataclass
class Setup:
  """What every phase needs: the mesh, the batch placer, the model and its jitted steps."""
  mesh: jax.sharding.Mesh
  put: BatchPlacer
  model: nn.Module
  tx: optax.GradientTransformation
  train_step: TrainStep
  eval_step: Callable
  batching: Batching = Batching()
  objective: objectives.Objective = objectives.CLASSIFY
  noise_seed: int | None = None  # the seed of the noise a denoising run hides tokens by

  @property
  def replicated(self) -> NamedSharding:
    return NamedSharding(self.mesh, P())


def setup(config: ml_collections.ConfigDict, spec: TaskSpec, *, training: bool = True) -> Setup:
  """Checks the batch sizes against the devices, then builds the model and its steps.

  The model is built for the task's length T (Linformer's projections, learned positions) also
  when batches are padded to less: a shorter batch reads the first rows of those parameters.
  `training=False` (lra eval, benchmarks of evaluation) skips the checks of training's batches.
  """
  batches = Batching.of(config)
  batches.check(spec.seq_len)
  if training:
    check_batchnorm(config, batches)
    distributed.check_micro_batches(config.train.batch_size, config.train.grad_accum_steps)
  distributed.check_divisible("eval.batch_size", config.eval.batch_size, jax.device_count())
  mesh = distributed.data_mesh()
  model = build_model(config, spec)
  if config.get("mixer_source"):  # a mixer from outside the suite: its output's shape, traced
    contract.check_shape_before_training(mixer_factory(config), config.mixer_source.spec,
                                         dim=config.model.dim, num_heads=config.model.num_heads,
                                         length=model.encoder.mixer_max_len)
  objective = objectives.of(config, pixels=spec.pixels)
  tc = config.train
  train_step, eval_step = make_steps(model, mesh, dropout_seed=tc.seed + 1,
                                     dropout_bits=tc.dropout_bits, objective=objective)
  # Seeds from train.seed: the data order (seed), dropout (seed + 1), hidden tokens (seed + 2).
  return Setup(mesh=mesh, put=BatchPlacer(mesh), model=model,
               tx=optim.make_optimizer(tc, optim.ssm_params(config)), train_step=train_step,
               eval_step=eval_step, batching=batches, objective=objective,
               noise_seed=tc.seed + 2 if objective.noise else None)


def check_batchnorm(config: ml_collections.ConfigDict, batches: Batching) -> None:
  """BatchNorm's one rule: every batch whole and padded to the task's length. Its statistics span
  the batch's rows and positions, pads included, so a micro-batch, a batch cut to its own length
  (padding batch or sorted) or one drawn from a length bucket is normalised by other numbers than
  the protocol's batch: a run of another model."""
  if config.model.get("norm") != "batch":
    return
  changed = [f"{key}={value}" for key, value, plain in (
      ("train.grad_accum_steps", batches.micro_batches, 1),
      ("data.padding", batches.padding, "fixed"), ("data.bucketing", batches.bucketing, False))
             if value != plain]
  if changed:
    raise errors.BadValue(
        f"model.norm=batch normalises each batch by statistics over all its rows and positions, "
        f"pads included, which {', '.join(changed)} would change: pass "
        "--config.train.grad_accum_steps=1 --config.data.padding=fixed "
        "--config.data.bucketing=false")


# ---------------------------------------------------------------------------------------------
# 2. State: fresh or restored.

@dataclasses.dataclass
class Book:
  """Run bookkeeping saved beside the state in every checkpoint (as JSON).

  Attributes:
    best_val: the evaluation with the best val accuracy so far, with test accuracy at that step
      (the statistic the LRA paper reports).
    best_test: the evaluation with the best test accuracy so far (what the Latte papers report).
    wall_time_s: training wall time before this process started.
    window: the partial sums of the current metrics window, so the first log line after a resume
      sums the same steps (in the same order) as an uninterrupted run's.
    window_steps: steps in that window.
    pretrained: a fine-tune's record of the pretraining run it started from (lra.training.
      init_from), kept so that a resumed fine-tune still names it.
  """
  best_val: dict = dataclasses.field(default_factory=lambda: {
      "step": -1, "val/accuracy": -1.0, "test/accuracy": None})
  best_test: dict = dataclasses.field(default_factory=lambda: {
      "step": -1, "test/accuracy": None})
  wall_time_s: float = 0.0
  window: dict | None = None
  window_steps: int = 0
  pretrained: dict | None = None

  @classmethod
  def from_json(cls, saved: dict) -> Book:
    saved = dict(saved)
    if "best" in saved:  # checkpoints written before both statistics were kept
      saved["best_val"] = saved.pop("best")
    return cls(**{f.name: saved[f.name] for f in dataclasses.fields(cls) if f.name in saved})

  def record_eval(self, step: int, metrics: dict[str, float],
                  best: tuple[str, bool] = ("val/accuracy", True)) -> bool:
    """Updates both bests from one evaluation; returns whether val improved on `best`'s metric
    (higher or lower is better as it says; the objective's)."""
    test = metrics.get("test/accuracy")
    if test is not None and (self.best_test["test/accuracy"] is None
                             or test > self.best_test["test/accuracy"]):
      self.best_test = {"step": step, "test/accuracy": test}
    key, higher = best
    known = self.best_val["step"] >= 0 and key in self.best_val
    if not known or (metrics[key] > self.best_val[key] if higher
                     else metrics[key] < self.best_val[key]):
      self.best_val = {"step": step, "val/accuracy": metrics["val/accuracy"],
                       "val/loss": metrics["val/loss"], "test/accuracy": test,
                       **({"val/lit_accuracy": metrics["val/lit_accuracy"]}
                          if "val/lit_accuracy" in metrics else {})}
      return True
    return False


class ModelState(TrainState):
  """A TrainState that also carries BatchNorm's running statistics (model.norm=batch).

  Models without BatchNorm keep the plain TrainState, so their checkpoints keep their layout.
  """
  batch_stats: Any = None


def create_state(model: nn.Module, variables: Mapping[str, Any],
                 tx: optax.GradientTransformation) -> TrainState:
  """The training state of freshly initialised `variables` (a ModelState if they hold
  BatchNorm statistics)."""
  if "batch_stats" in variables:
    return ModelState.create(apply_fn=model.apply, params=variables["params"], tx=tx,
                             batch_stats=variables["batch_stats"])
  return TrainState.create(apply_fn=model.apply, params=variables["params"], tx=tx)


def model_variables(state: TrainState) -> dict[str, Any]:
  """What `model.apply` reads for inference: the parameters, and BatchNorm's running
  statistics where the model has them."""
  stats = getattr(state, "batch_stats", None)
  return {"params": state.params} if stats is None else {"params": state.params,
                                                          "batch_stats": stats}


def init_state(s: Setup, spec: TaskSpec, seed: int) -> TrainState:
  """Fresh parameters and optimizer state, replicated over the mesh."""
  def create(key):
    batch = example_batch(spec, 1, noise=s.objective.noise)
    return create_state(s.model, s.model.init(key, batch, deterministic=True), s.tx)
  return jax.jit(create, out_shardings=s.replicated)(jax.random.PRNGKey(seed))


def restore_or_init(s: Setup, spec: TaskSpec, seed: int, ckpt: checkpoints.Checkpointer,
                    *, checkpoint: str = "resume") -> tuple[TrainState, Book, int]:
  """A checkpoint's state, else a fresh state at step 0.

  `checkpoint="resume"` (a run) skips damaged latest checkpoints (each moved aside with a line on
  stderr) for the newest intact one; "best" and "last" (lra eval) restore that one checkpoint or
  raise CheckpointDamagedError.
  """
  state = init_state(s, spec, seed)
  abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding),
                          state)
  if checkpoint != "resume":
    best = checkpoint == "best"
    step = ckpt.best_step() if best else ckpt.latest_step()
    if not step:
      return state, Book(), 0
    state, saved = ckpt.restore(step, abstract, best=best)
    return state, Book.from_json(saved), step
  ckpt.set_aside_damaged_best(_say)
  restored = ckpt.restore_latest(abstract, _say)
  if restored is None:
    return state, Book(), 0
  state, saved, step = restored
  return state, Book.from_json(saved), step


def _say(line: str) -> None:
  """A line every user should see (even with --quiet), from process 0 only."""
  if jax.process_index() == 0:
    print(line, file=sys.stderr, flush=True)


def num_params(state: TrainState) -> int:
  return sum(int(np.prod(p.shape)) for p in jax.tree.leaves(state.params))


def evaluate(s: Setup, state: TrainState, data: PreparedData, split: str,
             batch_size: int, max_examples: int = 0) -> dict[str, float]:
  """Weighted accuracy and loss over a split (its first `max_examples` when > 0), every example
  counted once."""
  totals: dict[str, float] = {}
  rows = s.put.rows(batch_size)
  arrays = data.split(split)
  if max_examples:
    arrays = {key: array[:max_examples] for key, array in arrays.items()}
  for batch in eval_batches(arrays, data.spec, batch_size, rows, s.batching, s.noise_seed):
    sums = jax.device_get(s.eval_step(state, s.put(batch, batch_size)))
    for key, value in sums.items():
      totals[key] = totals.get(key, 0.0) + float(value)
  count = max(totals.get("count", 0.0), 1.0)
  # The objective's held-out scores (`<name>_correct_sum` over `<name>_count`): their accuracies.
  more = {f"{split}/{key[:-len('_count')]}_accuracy":
          totals[key[:-len("_count")] + "_correct_sum"] / max(totals[key], 1.0)
          for key in totals if key.endswith("_count") and key != "count"}
  return {f"{split}/loss": totals.get("loss_sum", 0.0) / count,
          f"{split}/accuracy": totals.get("correct_sum", 0.0) / count,
          f"{split}/num_examples": int(totals.get("count", 0.0)), **more}


# ---------------------------------------------------------------------------------------------
# Run files.

def label_baselines(data: PreparedData) -> dict[str, float]:
  """Chance (1/C) and majority-class accuracy (the most frequent train label, scored on test)."""
  train_labels = np.asarray(data.split("train")["label"])
  test_labels = np.asarray(data.split("test")["label"])
  majority = int(np.bincount(train_labels, minlength=data.spec.num_classes).argmax())
  return {"chance_accuracy": 1.0 / data.spec.num_classes,
          "majority_accuracy": float(np.mean(test_labels == majority)), "majority_class": majority}


class RunFiles:
  """config.json, metrics.jsonl and final.json of one run; only process 0 writes them."""

  def __init__(self, config: ml_collections.ConfigDict, data: PreparedData, run_dir: Path,
               resume_step: int, params: int | None, *, curve: bool = True):
    """`curve=False` (a run that failed before training) leaves metrics.jsonl as it is, and a
    config.json already there: the run that folder holds is not the one that failed to start."""
    self.config, self.data, self.run_dir = config, data, run_dir
    self.lead = jax.process_index() == 0
    self.num_params = params
    if self.lead and (curve or not (run_dir / "config.json").exists()):
      run_dir.mkdir(parents=True, exist_ok=True)
      writers.write_json_atomic(run_dir / "config.json", config.to_dict())
    # The step an earlier, checkpoint-less attempt reached, whose curve is now replaced.
    old_curve = run_dir / "metrics.jsonl"
    self.replaced_step = 0 if resume_step or not curve or not old_curve.exists() else max(
        (r.get("step", 0) for r in writers.read_metrics(old_curve)), default=0)
    writing = self.lead and curve
    self.metrics = writers.MetricsWriter(run_dir / "metrics.jsonl", resume_step or None,
                                         enabled=writing, loggers=open_loggers(
                                             config, run_dir, resume_step or None,
                                             name=f"{config.task}/{mixer_label(config)}/"
                                                  f"{run_dir.name}") if writing else ())
    # Self-pretraining reads no labels at all (the baselines read test's).
    objective = objectives.of(config)
    self.context = {**({} if objective.noise else label_baselines(data)), **writers.environment(),
                    "objective": objective.name,
                    "execution_path": execution_path(config)}

  def final(self, status: str, step: int, book: Book, last_test: float | None, wall: float,
            rate: float, *, stop_reason: str | None = None,
            write: bool | None = None) -> dict[str, Any]:
    """Writes final.json (process 0, or whoever `write` says) and returns its dict."""
    config, spec = self.config, self.data.spec
    result = {
        "status": status, "task": config.task, "mixer": mixer_label(config),
        "preset": config.preset, "seed": config.train.seed, "step": step,
        "num_steps": config.train.num_steps, "best_step": book.best_val["step"],
        "val_accuracy": book.best_val["val/accuracy"],
        "test_accuracy": book.best_val["test/accuracy"],
        "best_test_accuracy": book.best_test["test/accuracy"],
        "best_test_step": book.best_test["step"], "test_accuracy_last": last_test,
        "num_params": self.num_params, "steps_per_s": rate, "wall_time_s": wall,
        "examples_seen": step * config.train.batch_size, "seq_len": spec.seq_len,
        "tokens": tokens_seen(config, spec.seq_len),
        "data": data_record(self.data.meta),
        "dtype": config.model.dtype, "batching": dataclasses.asdict(Batching.of(config)),
        "stop_reason": stop_reason, **self.context,
    }
    if "val/loss" in book.best_val:  # the held-out loss of the best evaluation (denoising's)
      result["val_loss"] = book.best_val["val/loss"]
    if "val/lit_accuracy" in book.best_val:  # denoising pixels: the lit ones alone (objectives)
      result["val_lit_accuracy"] = book.best_val["val/lit_accuracy"]
    if book.pretrained is not None:
      result["pretrained"] = book.pretrained
    if "mixer_source" in config:  # a mixer from outside the suite: which file, which version
      result["mixer_source"] = config.mixer_source.to_dict()
    if self.lead if write is None else write:
      writers.write_json_atomic(self.run_dir / "final.json", result)
    return result


# ---------------------------------------------------------------------------------------------
# The whole run.

def train_and_evaluate(config: ml_collections.ConfigDict, data: PreparedData, run_dir: Path,
                       *, progress: bool = True, stop_after_s: float | None = None,
                       on_step: StepObserver | None = None) -> dict[str, Any]:
  """Trains `config.model` on `data`, writing config.json, metrics.jsonl and final.json.

  Resumes from the latest checkpoint in `run_dir` if there is one, so the scores equal those of
  an uninterrupted run. Evaluates val and test at every eval point and reports both statistics:
  test accuracy at the best val step, and the best test accuracy over evaluations. Ctrl-C or
  SIGTERM saves a checkpoint and returns status "interrupted"; a non-finite training loss returns
  status "diverged". Every process of a multi-host run calls this; only process 0 writes files.
  With `stop_after_s` it also stops so as to end before that many seconds since the command began
  (lra.machine.stop_after), as after Ctrl-C, or before the first step if starting left too little
  time. `on_step(step, micro, state, sums)` sees every step as this loop made it (the step count
  after it, its micro-batches, the new state, its sums; the state is donated to the next step, so
  copy what you keep); a true return stops the run as a stop request does (lra bench
  --against-trainer follows the loop step by step so). Returns final.json's dict.
  """
  run_dir = Path(run_dir)
  s = setup(config, data.spec)
  ckpt = checkpoints.Checkpointer(run_dir, keep=config.checkpoint.keep)
  files = bar = None
  # Several processes read a stop request two steps after it is made (_loop): budgeted.
  deadline = None if stop_after_s is None else stop_after.for_run(
      stop_after_s, config, sum(data.num_examples(split) for split in s.objective.splits),
      lag=2 if jax.process_count() > 1 else 0)
  try:
    began = time.monotonic()
    state, book, start_step = restore_or_init(s, data.spec, config.train.seed, ckpt)
    if not start_step and run_identity.phase(config) == "spt":  # once: never over a resumed state
      state, book.pretrained = init_from.load(state, config, data_record(data.meta))
    init_s = time.monotonic() - began  # compiling the init: what compiling the steps is guessed at
    files = RunFiles(config, data, run_dir, start_step, num_params(state))
    bar = Steps(config.train.num_steps, enabled=progress and files.lead)
    if start_step:
      bar.message(f"resuming {run_dir} from step {start_step}")
    elif files.replaced_step and files.lead:
      # Checkpoints are ignored by git: a run dir cloned to a new machine has curves but no state
      # unless its checkpoint was added by hand. Said even with --quiet: the curve is replaced.
      print(f"lra: {run_dir} reached step {files.replaced_step} but holds no checkpoint "
            f"(checkpoints/ is ignored by git unless added with git add -f): starting again "
            f"from step 0", file=sys.stderr)
    return _loop(config, data, s, state, book, start_step, ckpt, files, bar, deadline, init_s,
                 on_step)
  except distributed.PeerLost:
    ckpt = None  # closing waits for saves in flight, whose barriers need the lost process
    raise
  except Exception as error:  # pylint: disable=broad-except
    if not unexpected(error):
      raise
    # Before the loop (a model that fails to build, a restore that breaks): no state yet.
    failed = RunFailed.logged(error, run_dir)
    _best_effort(lambda: RunFiles(config, data, run_dir, 0, None, curve=False).final(
        "failed", ckpt.latest_step() or 0, Book(), None, 0.0, 0.0, stop_reason=str(failed)))
    raise failed from None
  finally:
    if bar is not None:
      bar.close()  # a terminal's bar stops redrawing, its last state left on screen
    if files is not None:
      files.metrics.close()  # the TensorBoard and W&B writers (lra/runs/loggers.py)
    if ckpt is not None:
      ckpt.close()


def _loop(config: ml_collections.ConfigDict, data: PreparedData, s: Setup, state: TrainState,
          book: Book, step: int, ckpt: checkpoints.Checkpointer, files: RunFiles,
          bar: Steps, deadline: stop_after.Deadline | None = None,
          init_s: float = 0.0, on_step: StepObserver | None = None) -> dict[str, Any]:
  """Phase 3: from `step` to the end of training (or a stop); returns final.json's dict.

  With a `deadline` (--stop-after), the start-up is checked before compiling the steps (guessed
  at `init_s`, what the model's initialisation took) and before the first step (guessed at its
  compile time): a start-up that leaves no time for a step and its save stops the run there.
  """
  tc = config.train
  started = time.time()
  throughput = Throughput()
  previous_wall = book.wall_time_s
  wall = lambda: previous_wall + time.time() - started  # noqa: E731

  def save(step: int, window) -> None:
    book.wall_time_s = wall()
    book.window = None if window is None else {k: float(v) for k, v in
                                               jax.device_get(window).items()}
    ckpt.save(step, state, dataclasses.asdict(book))
    # final.json follows each checkpoint: a run killed later (kill -9, a session's end) is read
    # by tables and `lra status` at the step it resumes from, with its best evaluation so far.
    files.final("running", step, book, None, book.wall_time_s, rate)

  micro_rows = tc.batch_size // s.batching.micro_batches  # the rows of each micro-batch
  stream = step_batches(data.split("train"), data.spec, tc.batch_size, tc.seed, step,
                        s.put.rows(micro_rows), s.batching, noise_seed=s.noise_seed)
  add = jax.jit(lambda a, b: jax.tree.map(jnp.add, a, b))
  window = (None if book.window is None else
            jax.device_put({k: np.float32(v) for k, v in book.window.items()}, s.replicated))
  last_test, rate = None, 0.0
  # Many processes must stop at the same step: each puts its stop request into the step's batch
  # and reads the flag all of them agreed on (make_steps).
  agree = jax.process_count() > 1
  flag = None  # that flag of the latest step, still on the device
  files.final("running", step, book, None, previous_wall, 0.0)

  def ended(status: str, reason: str, write: bool | None = None) -> None:  # not the loop's choice
    files.final(status, step, book, None, wall(), rate, stop_reason=reason, write=write)

  def untrained(late: str | None) -> dict[str, Any]:  # --stop-after: no time for a step
    reason = late or f"{deadline.reason}: another process's start-up left no time for a step"
    _say(f"lra: {reason}")
    return files.final("interrupted", step, book, None, wall(), rate, stop_reason=reason)

  fit = _Fit(config)
  # One output of each step dispatched since the last log point (which waits for them all): the
  # host runs ahead of the device, so a stop can wait for many (_wait_for_queued says so).
  queued: collections.deque = collections.deque(maxlen=_QUEUE_SEEN)
  with interrupts.StopRequest() as stop, _faults_end_the_run(ended, ckpt, fit, files.run_dir):
    if deadline is not None:
      late = deadline.before_training(step, init_s, init_s, "JAX, the data, the model")
      if _anyone(late is not None):
        return untrained(late)
    began = time.monotonic()
    fit.need = check_fits(config, s, state, data.spec, ("train",))
    compile_s = time.monotonic() - began
    fit.need.update(check_fits(config, s, state, data.spec, ("eval",)))
    if deadline is not None:
      late = deadline.before_training(step, 0.0, compile_s, "JAX, the data, compiling")
      if _anyone(late is not None):
        return untrained(late)
      deadline.programs(s.batching.programs(data.spec.seq_len), compile_s,
                        per_step=s.batching.programs_per_step)
      deadline.start(step)
    throughput.restart()  # compiling (check_fits) is not training speed
    bar.start()
    # Batch lengths compiled so far, each its own program (check_fits compiled the task's T).
    lengths_met = {data.spec.seq_len}
    while step < tc.num_steps:
      micro = next(stream)  # the step's batch: its k micro-batches, this process's rows of each
      lengths = {next(v.shape[1] for k, v in batch.items() if k.startswith("inputs"))
                 for batch in micro}
      new_programs, lengths_met = len(lengths - lengths_met), lengths_met | lengths
      if agree:
        for batch in micro:
          batch["stop"] = np.full(len(batch["label"]), stop.requested, np.int32)
      placed = [s.put(batch, micro_rows) for batch in micro]
      state, sums = s.train_step(state, placed)
      # Read one step late, so the host keeps the next step queued; all read the same step's.
      previous_flag, flag = flag, sums.pop("stop", None)
      # Summed on the device; fetched only at log points so the host never waits in between.
      window = sums if window is None else add(window, sums)
      step += 1
      queued.append((step, sums["count"]))
      if on_step is not None and on_step(step, micro, state, sums) and not stop.requested:
        stop.requested, stop.signal_name = True, "the step observer"
      book.window_steps += 1
      throughput.step()
      log_point = step % tc.log_every_steps == 0 or step == tc.num_steps
      if not log_point and bar.estimate_due():  # log points far apart: a first ETA now
        jax.block_until_ready(state)  # the speed of steps run, not of steps queued
        bar.estimate(step, throughput.rate())
      if log_point:
        totals = jax.device_get(window)
        rate = throughput.rate()
        count = max(float(totals["count"]), 1.0)
        metrics = {"train/loss": float(totals["loss_sum"]) / count,
                   "train/accuracy": float(totals["correct_sum"]) / count,
                   "train/grad_norm": float(sums["grad_norm"]), "train/steps_per_s": rate}
        files.metrics.write(step, metrics)
        bar.show(step, metrics, rate)
        if not math.isfinite(metrics["train/loss"]):
          cause = _non_finite_cause(config, s, data.spec, placed)  # the summary says it
          bar.message(f"loss is {metrics['train/loss']} at step {step}: stopping")
          ckpt.wait()
          return files.final("diverged", step, book, None, wall(), rate, stop_reason=cause)
        window, book.window_steps = None, 0
        queued.clear()  # device_get above waited for every step so far
        throughput.restart()
        ckpt.seal()  # a finished save gets its manifest now, not only at the next save
      if step % config.eval.every_steps == 0 or step == tc.num_steps:
        jax.block_until_ready(state)  # a failed train step is reported as the train step's
        fit.running = "eval"
        with throughput.paused():  # eval time is not training throughput
          metrics = {key: value for split in s.objective.splits for key, value in evaluate(
              s, state, data, split, config.eval.batch_size, config.eval.max_examples).items()}
          fit.running = "train"
          if book.record_eval(step, metrics, s.objective.best):
            ckpt.save(step, state, dataclasses.asdict(book), best=True)
          if step == tc.num_steps:
            last_test = metrics.get("test/accuracy")
          files.metrics.write(step, metrics)
          bar.message(_eval_line(step, metrics, book, s.objective))
      if step % config.checkpoint.every_steps == 0 or step == tc.num_steps:
        save(step, window)
      if deadline is not None and new_programs:
        deadline.compiled(step, new_programs)
      if deadline is not None and deadline.should_stop(step) and not stop.requested:
        stop.requested, stop.signal_name = True, deadline.reason
      requested = (bool(jax.device_get(previous_flag)) if previous_flag is not None
                   else stop.requested and not agree)
      if requested and step < tc.num_steps:
        name = stop.signal_name or "a stop request on another process"
        bar.message(f"{name} at step {step}: saving a checkpoint there and stopping")
        _wait_for_queued(queued, step, rate, bar, ckpt.latest_step())
        began = time.monotonic()
        save(step, window)
        ckpt.wait()
        bar.message(f"saved step {step} ({time.monotonic() - began:.0f} s)")
        return files.final("interrupted", step, book, None, wall(), rate,
                           stop_reason=stop.signal_name or "stop requested on another process")
    ckpt.wait()
  return files.final("complete", step, book, last_test, wall(), rate)


def _non_finite_cause(config: ml_collections.ConfigDict, s: Setup, spec: TaskSpec,
                      batch: Sequence[Mapping[str, jax.Array]]) -> str:
  """Why the loss stopped being finite, for final.json's stop_reason: "forward pass: ...",
  "backward pass: ..." or "training: ..." (run_summary words the run's state by that first
  part), or "" when it cannot tell. One training step on the last step's batch from freshly
  initialised parameters tells a model whose forward or backward pass is not finite before any
  update (a mixer's: `lra check` finds where) from training that blew up. Every process calls
  this (the step is collective)."""
  mixer = config.get("mixer_source", {}).get("spec") or config.model.mixer
  check = (f"`lra check {mixer}` runs the mixer on small inputs and names what is not finite "
           "(its outputs, gradients, pads)")
  try:
    _, sums = s.train_step(init_state(s, spec, config.train.seed), batch)
    sums = jax.device_get(sums)
  except Exception:  # noqa: BLE001 - a diagnosis must not hide the run's own ending
    return ""
  if not np.isfinite(sums["loss_sum"]):
    return ("forward pass: the loss is not finite from the initial parameters on this batch, "
            "before any update, so this is the model, not an optimisation problem; " + check)
  if not np.isfinite(sums["grad_norm"]):
    return ("backward pass: the loss is finite from the initial parameters but its gradients "
            "are not, so the first update spoils every parameter; " + check)
  return ("training: from the initial parameters this batch's loss and gradients are finite, "
          "so training itself blew up (a lower train.learning_rate, or train.grad_clip_norm, "
          "may hold it)")


_QUEUE_SEEN = 100_000  # steps: far more than a host ever runs ahead between two log points
_STILL_WAITING_S = 10


def _wait_for_queued(queued: Sequence[tuple[int, jax.Array]], step: int, rate: float,
                     bar: Steps, saved: int | None) -> None:
  """Waits, saying for what, until the device has run every step dispatched up to `step`.

  On a CPU the host may dispatch dozens of steps ahead of the device (jit is asynchronous), so
  after Ctrl-C the save waited silently for all of them (~100 s at 3 s a step). Polled, not
  blocked on, so a second Ctrl-C stops at once; `saved` is the step that then resumes.
  """
  pending = [(s, out) for s, out in queued if not out.is_ready()]
  if not pending:
    return
  guess = f", about {len(pending) / rate:.0f} s at {rate:.2f} steps/s" if rate else ""
  bar.message(f"the device is at step {pending[0][0] - 1}: waiting for the {len(pending)} steps "
              f"already queued up to step {step}{guess}, then saving; Ctrl-C again stops now "
              "without saving (the run then resumes from "
              + (f"step {saved})" if saved else "its start)"))
  said = time.monotonic()
  while pending:
    time.sleep(0.05)
    pending = [(s, out) for s, out in pending if not out.is_ready()]
    if pending and time.monotonic() - said >= _STILL_WAITING_S:
      bar.message(f"still waiting: the device is at step {pending[0][0] - 1} of {step}")
      said = time.monotonic()


def _eval_line(step: int, metrics: dict[str, float], book: Book,
               objective: objectives.Objective) -> str:
  """One evaluation on the progress line: val, its best so far, and test where it is read."""
  key, _ = objective.best
  what = key.split("/")[1] + (" of hidden tokens" if objective.noise else "")
  line = (f"step {step}: val {what} {metrics[key]:.4f} (best {book.best_val[key]:.4f} at step "
          f"{book.best_val['step']})")
  return line + (f", test {metrics['test/accuracy']:.4f}" if "test/accuracy" in metrics else "")


def _anyone(says: bool) -> bool:
  """Whether any process says yes; every process calls this at the same point."""
  if jax.process_count() == 1:
    return says
  return bool(np.max(multihost_utils.process_allgather(np.asarray(says, np.int32))))


def check_fits(config: ml_collections.ConfigDict, s: Setup, state: TrainState, spec: TaskSpec,
               steps: tuple[str, ...] = ("train", "eval"),
               length: int | None = None) -> dict[str, int | None]:
  """XLA's estimate of each step's bytes per device, at the task's full length T, checked against
  the device's memory before anything runs (the compiled program is the one the run then uses;
  with micro-batches, one micro-batch's accumulation at T, the largest program of a step).

  `length`: lower the steps at this batch length instead of T (a warm-up compiling the program
  of every length a run will meet; the largest, T's, is the one checked for memory).

  Raises:
    OutOfMemoryError: a step needs more than the device has; the one line names the settings
      that shrink it.
  """
  seq_len = length or spec.seq_len
  have, source = memory.device_bytes(jax.devices()[0])
  if jax.process_count() > 1:  # all processes must take the same branch: the smallest device
    # In MiB: without jax_enable_x64 the gathered numbers are int32.
    mib = np.asarray(min((have or 2**62) >> 20, 2**31 - 1), np.int32)
    have = int(np.min(multihost_utils.process_allgather(mib))) << 20
  need = {}
  micro = s.batching.micro_batches
  for kind in steps:
    rows = config.train.batch_size // micro if kind == "train" else config.eval.batch_size
    shapes = {**{k: ((rows, seq_len), jnp.int32) for k in _input_keys(spec)},
              **{"mask" + k[len("inputs"):]: ((rows, seq_len), jnp.bool_)
                 for k in _input_keys(spec)},
              "label": ((rows,), jnp.int32), "weight": ((rows,), jnp.float32)}
    if s.objective.noise:
      shapes.update({"noise" + k[len("inputs"):]: ((rows, seq_len), jnp.float32)
                     for k in _input_keys(spec)})
    if kind == "train" and jax.process_count() > 1:
      shapes["stop"] = ((rows,), jnp.int32)
    batch = {k: jax.ShapeDtypeStruct(shape, dtype, sharding=s.put.sharding)
             for k, (shape, dtype) in shapes.items()}
    if kind == "train" and micro > 1:
      need[kind] = s.train_step.micro_bytes(state, batch)
    else:
      step_fn = s.train_step if kind == "train" else s.eval_step
      need[kind] = memory.step_bytes(step_fn.lower(state, batch).compile())
    if need[kind] and have and need[kind] > have:
      raise memory.does_not_fit(config, kind, need[kind], have, source)
  return need


def _input_keys(spec: TaskSpec) -> tuple[str, ...]:
  return ("inputs1", "inputs2") if spec.dual else ("inputs",)


@dataclasses.dataclass
class _Fit:
  """What the out-of-memory line needs: XLA's estimates and which step was running."""
  config: ml_collections.ConfigDict
  need: dict = dataclasses.field(default_factory=dict)
  running: str = "train"

  def error(self, error: Exception) -> memory.OutOfMemoryError | None:
    return memory.as_out_of_memory(error, self.config, self.running, self.need.get(self.running))


@contextlib.contextmanager
def _faults_end_the_run(ended: Callable[..., None], ckpt: checkpoints.Checkpointer,
                        fit: _Fit, run_dir: Path) -> Iterator[None]:
  """A lost peer process or a failed checkpoint write ends the run as `interrupted` (resumable) in
  final.json, then propagates: PeerLost (with the step to resume from) or CheckpointWriteError.
  A step that does not fit ends it as `failed` and raises OutOfMemoryError (one line); so does any
  unexpected error, as RunFailed, its traceback in `run_dir`'s error.log."""
  try:
    yield
  except checkpoints.CheckpointWriteError as error:
    _best_effort(ended, "interrupted", f"checkpoint write failed: {error}")
    raise
  except Exception as error:  # pylint: disable=broad-except
    lost = distributed.lost_peer(error)
    if lost is None:
      oom = fit.error(error)
      if oom is None and unexpected(error):
        failed = RunFailed.logged(error, run_dir)
        _best_effort(ended, "failed", str(failed))
        raise failed from None
      if oom is None:
        raise
      _best_effort(ended, "failed", str(oom))
      raise oom from None
    lost.resume_step = ckpt.committed_step() or 0
    _best_effort(ended, "interrupted", lost.describe(), write=lost.final_json_is_ours)
    raise lost from None


class RunFailed(Exception):
  """An error the run did not expect ended it; the message is one line naming the log file that
  holds the traceback."""

  @classmethod
  def logged(cls, error: BaseException, run_dir: Path) -> RunFailed:
    """Writes `error`'s traceback to the run folder (error.log; error.pN.log for process N > 0)."""
    index = jax.process_index()
    log = run_dir / ("error.log" if index == 0 else f"error.p{index}.log")
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    lines = str(error).strip().splitlines()
    what = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    frame = tracebacks.user_frame(error)  # raised in the user's own code (their mixer): where
    what += f" at {tracebacks.where(frame)}" if frame else ""
    try:
      run_dir.mkdir(parents=True, exist_ok=True)
      log.write_text(text)
    except OSError as unwritable:
      return cls(f"{what} (its traceback could not be written to {log}: {unwritable})")
    return cls(f"{what} (the traceback is in {log})")


def unexpected(error: Exception) -> bool:
  """Not one of the stops the run reports itself in one line: a user's or their machine's error
  (lra/errors.py: a bad setting, out of memory, a damaged checkpoint, a failed write), a lost
  peer, an error already logged. What is left is a bug, whose traceback goes to error.log."""
  return not (errors.is_mistake(error) or isinstance(error, (distributed.PeerLost, RunFailed)))


def _best_effort(ended: Callable[..., None], *args, **kwargs) -> None:
  # final.json is the record of the stop, but the error being reported matters more than it
  # (a full disk may refuse this write too).
  try:
    ended(*args, **kwargs)
  except OSError:
    pass


def data_record(meta: Mapping[str, Any]) -> dict:
  """final.json's account of the data: meta.json's, its source's path without this machine in it
  (the cache keeps the full path, for its own rebuild command), and one sha256 over the prepared
  arrays' own: what a resumed run checks it still trains on (run_identity.data_changes)."""
  record = {k: meta.get(k) for k in ("splits", "source", "validation", "options")}
  if isinstance(record["source"], Mapping) and "path" in record["source"]:
    record["source"] = {**record["source"], "path": writers.portable(record["source"]["path"])}
  record["arrays_sha256"] = run_identity.arrays_fingerprint(meta.get("arrays"))
  return record
