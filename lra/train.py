"""The one train loop: any task, any mixer, one device or many (jit over a 1-D `data` mesh).

`train_and_evaluate(config, data, run_dir)` trains, evaluates on val every `eval.every_steps`,
tests at the best validation step and at the last step, writes the run directory and returns
final.json's contents.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import time
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax.training import train_state
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec as P

from lra import checkpoints, distributed, interrupts, optim, writers
from models.encoder import Classifier, Encoder
from tasks.cache import PreparedData, eval_batches, train_batches
from tasks.spec import TaskSpec


class TrainState(train_state.TrainState):
  pass


DTYPES = ("float32", "bfloat16")


def build_model(config: ml_collections.ConfigDict, spec: TaskSpec) -> nn.Module:
  """The classifier for this task's spec; sizes from the config, shapes from the task."""
  m = config.model
  if m.dtype not in DTYPES:
    raise ValueError(f"model.dtype must be one of {DTYPES}, got {m.dtype!r}")
  encoder = Encoder(vocab_size=spec.vocab_size, max_len=spec.seq_len, dim=m.dim,
                    num_layers=m.num_layers, num_heads=m.num_heads, mlp_dim=m.mlp_dim,
                    dropout_rate=m.dropout, mixer=m.mixer,
                    mixer_config=config.mixers[m.mixer].to_dict(), embedding=m.embedding,
                    pos_encoding=m.pos_encoding, pooling=m.pooling, dtype=m.dtype,
                    remat=m.remat, block=m.block)
  return Classifier(encoder=encoder, num_classes=spec.num_classes, dual=spec.dual)


def _example_batch(spec: TaskSpec, batch_size: int) -> dict[str, np.ndarray]:
  keys = ("1", "2") if spec.dual else ("",)
  batch = {}
  for k in keys:
    batch["inputs" + k] = np.zeros((batch_size, spec.seq_len), np.int32)
    batch["mask" + k] = np.ones((batch_size, spec.seq_len), bool)
  return batch


def _weighted_metrics(logits, batch) -> dict[str, jax.Array]:
  """Sums and counts, so averages are exact over any device count and partial batch."""
  logits = logits.astype(jnp.float32)  # the loss is float32 whatever the compute dtype
  loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"])
  correct = (jnp.argmax(logits, -1) == batch["label"]).astype(jnp.float32)
  w = batch["weight"]
  return {"loss_sum": jnp.sum(loss * w), "correct_sum": jnp.sum(correct * w), "count": jnp.sum(w)}


def make_steps(model: nn.Module, mesh: jax.sharding.Mesh, dropout_seed: int,
               grad_accum_steps: int = 1):
  """Jitted train and eval steps: batch sharded over `data`, state replicated.

  With `grad_accum_steps=k` the batch [B] is split into k micro-batches of B/k rows (row r goes to
  micro-batch r % k, so each device keeps its own rows) whose loss sums and gradients are added
  before one update: the same update as the whole batch at once, in 1/k of the activation memory.
  """
  replicated = NamedSharding(mesh, P())
  base_key = jax.random.PRNGKey(dropout_seed)

  def grads_and_sums(params, batch, key):
    def loss_fn(params):
      logits = model.apply({"params": params}, batch, deterministic=False, rngs={"dropout": key})
      sums = _weighted_metrics(logits, batch)
      return sums["loss_sum"], sums
    (_, sums), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    return grads, sums

  def train_step(state: TrainState, batch):
    # Dropout depends on (seed, step) only: a resumed run draws the same masks.
    key = jax.random.fold_in(base_key, state.step)
    if grad_accum_steps == 1:
      grads, sums = grads_and_sums(state.params, batch, key)
    else:
      k = grad_accum_steps
      micro = jax.tree.map(lambda a: a.reshape(a.shape[0] // k, k, *a.shape[1:]).swapaxes(0, 1),
                           batch)
      micro = jax.lax.with_sharding_constraint(micro, NamedSharding(mesh, P(None, "data")))
      first = jax.tree.map(lambda a: a[0], micro)
      zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                           jax.eval_shape(grads_and_sums, state.params, first, key))

      def accumulate(total, xs):
        index, batch = xs
        part = grads_and_sums(state.params, batch, jax.random.fold_in(key, index))
        return jax.tree.map(jnp.add, total, part), None
      (grads, sums), _ = jax.lax.scan(accumulate, zeros, (jnp.arange(k), micro))
    # Gradient of the mean loss over the whole batch's real rows.
    grads = jax.tree.map(lambda g: g / jnp.maximum(sums["count"], 1.0), grads)
    sums["grad_norm"] = optax.global_norm(grads)
    return state.apply_gradients(grads=grads), sums

  def eval_step(state: TrainState, batch):
    return _weighted_metrics(model.apply({"params": state.params}, batch, deterministic=True),
                             batch)

  return (jax.jit(train_step, out_shardings=(replicated, replicated), donate_argnums=0),
          jax.jit(eval_step, out_shardings=replicated))


def evaluate(eval_step, state, data: PreparedData, split: str, batch_size: int,
             put) -> dict[str, float]:
  """Weighted accuracy and loss over a split; `put(batch, rows)` builds the global batch."""
  totals = {"loss_sum": 0.0, "correct_sum": 0.0, "count": 0.0}
  rows = put.rows(batch_size)
  for batch in eval_batches(data.split(split), data.spec, batch_size, rows):
    sums = jax.device_get(eval_step(state, put(batch, batch_size)))
    for key in totals:
      totals[key] += float(sums[key])
  count = max(totals["count"], 1.0)
  return {f"{split}/loss": totals["loss_sum"] / count,
          f"{split}/accuracy": totals["correct_sum"] / count,
          f"{split}/num_examples": int(totals["count"])}


class BatchPlacer:
  """Turns this process's rows of a batch into global arrays sharded over `data`."""

  def __init__(self, mesh: jax.sharding.Mesh):
    self.sharding = distributed.batch_sharding(mesh)

  def rows(self, global_rows: int) -> tuple[int, int]:
    return distributed.local_rows(self.sharding, global_rows)

  def __call__(self, local: dict[str, np.ndarray], global_rows: int) -> dict[str, jax.Array]:
    return distributed.global_batch(local, self.sharding, global_rows)


def label_baselines(data: PreparedData) -> dict[str, float]:
  """Chance (1/C) and majority-class accuracy (the most frequent train label, scored on test)."""
  train_labels = np.asarray(data.split("train")["label"])
  test_labels = np.asarray(data.split("test")["label"])
  majority = int(np.bincount(train_labels, minlength=data.spec.num_classes).argmax())
  return {"chance_accuracy": 1.0 / data.spec.num_classes,
          "majority_accuracy": float(np.mean(test_labels == majority)), "majority_class": majority}


@dataclasses.dataclass
class Progress:
  """One live line: step, loss, accuracy, steps/s, ETA."""
  total: int
  enabled: bool = True
  _tty: bool = dataclasses.field(default_factory=lambda: sys.stderr.isatty())

  def show(self, step: int, metrics: dict[str, float], steps_per_s: float) -> None:
    if not self.enabled:
      return
    eta = (self.total - step) / max(steps_per_s, 1e-9)
    line = (f"step {step}/{self.total}  loss {metrics['train/loss']:.4f}  "
            f"acc {metrics['train/accuracy']:.3f}  {steps_per_s:.2f} steps/s  "
            f"ETA {time.strftime('%H:%M:%S', time.gmtime(eta))}")
    print(("\r" + line + "   ") if self._tty else line, end="" if self._tty else "\n",
          file=sys.stderr, flush=True)

  def message(self, text: str) -> None:
    if self.enabled:
      print(("\n" if self._tty else "") + text, file=sys.stderr, flush=True)


def train_and_evaluate(config: ml_collections.ConfigDict, data: PreparedData, run_dir: Path,
                       *, progress: bool = True) -> dict[str, Any]:
  """Trains `config.model` on `data`, writing config.json, metrics.jsonl and final.json.

  Resumes from the latest checkpoint in `run_dir` if there is one, with the same data order,
  dropout masks and metrics window, so the scores equal those of an uninterrupted run. Ctrl-C or
  SIGTERM saves a checkpoint and returns status "interrupted"; a non-finite training loss returns
  status "diverged". Every process of a multi-host run calls this; only process 0 writes files.
  Returns final.json's dict.
  """
  run_dir = Path(run_dir)
  spec, tc = data.spec, config.train
  lead = jax.process_index() == 0
  if lead:
    run_dir.mkdir(parents=True, exist_ok=True)
  mesh = distributed.data_mesh()
  accum = tc.grad_accum_steps
  if accum < 1:
    raise ValueError(f"train.grad_accum_steps must be >= 1, got {accum}")
  distributed.check_divisible("train.batch_size", tc.batch_size, jax.device_count() * accum)
  distributed.check_divisible("eval.batch_size", config.eval.batch_size, jax.device_count())
  put = BatchPlacer(mesh)
  replicated = NamedSharding(mesh, P())

  model = build_model(config, spec)
  tx = optim.make_optimizer(tc)

  def init_state(key):
    params = model.init(key, _example_batch(spec, 1), deterministic=True)["params"]
    return TrainState.create(apply_fn=model.apply, params=params, tx=tx)
  state = jax.jit(init_state, out_shardings=replicated)(jax.random.PRNGKey(tc.seed))
  num_params = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(state.params))
  train_step, eval_step = make_steps(model, mesh, dropout_seed=tc.seed + 1,
                                     grad_accum_steps=accum)

  ckpt = checkpoints.Checkpointer(run_dir, keep=config.checkpoint.keep)
  start_step = ckpt.latest_step() or 0
  book = {"best": {"step": -1, "val/accuracy": -1.0, "test/accuracy": None},
          "wall_time_s": 0.0, "window": None, "window_steps": 0}
  if start_step:
    state, restored = ckpt.restore(start_step, jax.tree.map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), state))
    book.update(restored)
  best = book["best"]
  if lead:
    writers.write_json_atomic(run_dir / "config.json", config.to_dict())
  writer = writers.MetricsWriter(run_dir / "metrics.jsonl", start_step if start_step else None,
                                 enabled=lead)
  env = writers.environment()
  baselines = label_baselines(data)
  bar = Progress(tc.num_steps, enabled=progress and lead)
  if start_step:
    bar.message(f"resuming {run_dir} from step {start_step}")

  def final(status: str, step: int, last_test: float | None, wall: float, rate: float):
    result = {
        "status": status, "task": config.task, "mixer": config.model.mixer,
        "preset": config.preset, "seed": tc.seed, "step": step, "num_steps": tc.num_steps,
        "best_step": best["step"], "val_accuracy": best["val/accuracy"],
        "test_accuracy": best["test/accuracy"], "test_accuracy_last": last_test,
        **baselines, "num_params": num_params, "steps_per_s": rate, "wall_time_s": wall,
        "seq_len": spec.seq_len,
        "data": {k: data.meta.get(k) for k in ("splits", "source", "validation", "options")},
        "dtype": config.model.dtype, **env,
    }
    if lead:
      writers.write_json_atomic(run_dir / "final.json", result)
    return result

  def save(step: int, window, window_steps: int) -> None:
    # The partial metrics window is saved too, so the first log line after a resume sums the
    # same steps (in the same order) as an uninterrupted run's.
    sums = None if window is None else {k: float(v) for k, v in jax.device_get(window).items()}
    ckpt.save(step, state, {"best": best, "wall_time_s": wall(), "window": sums,
                            "window_steps": window_steps})

  train_rows = put.rows(tc.batch_size)
  stream = train_batches(data.split("train"), spec, tc.batch_size, tc.seed, start_step,
                         train_rows)
  add = jax.jit(lambda a, b: jax.tree.map(jnp.add, a, b))
  window, window_steps = book["window"], book["window_steps"]
  if window is not None:
    window = jax.device_put({k: np.float32(v) for k, v in window.items()}, replicated)
  started = window_start = time.time()
  previous_wall = float(book["wall_time_s"])
  wall = lambda: previous_wall + time.time() - started  # noqa: E731
  step, last_test, rate = start_step, None, 0.0
  final("running", step, None, previous_wall, 0.0)
  with interrupts.StopRequest() as stop:
    while step < tc.num_steps:
      state, sums = train_step(state, put(next(stream), tc.batch_size))
      # Summed on the device; fetched only at log points so the host never waits in between.
      window = sums if window is None else add(window, sums)
      step += 1
      window_steps += 1
      log_point = step % tc.log_every_steps == 0 or step == tc.num_steps
      if log_point:
        totals = jax.device_get(window)
        rate = window_steps / max(time.time() - window_start, 1e-9)
        count = max(float(totals["count"]), 1.0)
        metrics = {"train/loss": float(totals["loss_sum"]) / count,
                   "train/accuracy": float(totals["correct_sum"]) / count,
                   "train/grad_norm": float(sums["grad_norm"]), "train/steps_per_s": rate}
        writer.write(step, metrics)
        bar.show(step, metrics, rate)
        if not math.isfinite(metrics["train/loss"]):
          bar.message(f"loss is {metrics['train/loss']} at step {step}: stopping (diverged)")
          ckpt.wait()
          ckpt.close()
          return final("diverged", step, None, wall(), rate)
        window, window_steps, window_start = None, 0, time.time()
      if step % config.eval.every_steps == 0 or step == tc.num_steps:
        val = evaluate(eval_step, state, data, "val", config.eval.batch_size, put)
        if val["val/accuracy"] > best["val/accuracy"]:
          test = evaluate(eval_step, state, data, "test", config.eval.batch_size, put)
          best = {"step": step, "val/accuracy": val["val/accuracy"],
                  "test/accuracy": test["test/accuracy"]}
          val.update(test)
          ckpt.save(step, state, {"best": best}, best=True)
        if step == tc.num_steps:
          last_test = (val["test/accuracy"] if "test/accuracy" in val else
                       evaluate(eval_step, state, data, "test", config.eval.batch_size,
                                put)["test/accuracy"])
        writer.write(step, val)
        bar.message(f"step {step}: val accuracy {val['val/accuracy']:.4f} "
                    f"(best {best['val/accuracy']:.4f} at step {best['step']})")
        window_start = time.time()  # eval time is not training throughput
      if step % config.checkpoint.every_steps == 0 or step == tc.num_steps:
        save(step, window, window_steps)
      # Multi-host: every process must stop at the same step, so they agree at log points.
      if _stop_agreed(stop.requested, log_point) and step < tc.num_steps:
        bar.message(f"{stop.signal_name} at step {step}: saving a checkpoint and stopping")
        save(step, window, window_steps)
        ckpt.wait()
        ckpt.close()
        return final("interrupted", step, None, wall(), rate)
  ckpt.wait()
  ckpt.close()
  return final("complete", step, last_test, wall(), rate)


def _stop_agreed(requested: bool, log_point: bool) -> bool:
  """Single process: stop at once. Many: stop when any process asked, checked at log points."""
  if jax.process_count() == 1:
    return requested
  if not log_point:
    return False
  flags = multihost_utils.process_allgather(np.asarray(requested))
  return bool(np.any(flags))
