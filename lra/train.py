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
from jax.sharding import NamedSharding, PartitionSpec as P

from lra import checkpoints, optim, writers
from models.encoder import Classifier, Encoder
from tasks.cache import PreparedData, eval_batches, train_batches
from tasks.spec import TaskSpec


class TrainState(train_state.TrainState):
  pass


def build_model(config: ml_collections.ConfigDict, spec: TaskSpec) -> nn.Module:
  """The classifier for this task's spec; sizes from the config, shapes from the task."""
  m = config.model
  encoder = Encoder(vocab_size=spec.vocab_size, max_len=spec.seq_len, dim=m.dim,
                    num_layers=m.num_layers, num_heads=m.num_heads, mlp_dim=m.mlp_dim,
                    dropout_rate=m.dropout, mixer=m.mixer,
                    mixer_config=config.mixers[m.mixer].to_dict(), embedding=m.embedding,
                    pos_encoding=m.pos_encoding, pooling=m.pooling)
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
  loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"])
  correct = (jnp.argmax(logits, -1) == batch["label"]).astype(jnp.float32)
  w = batch["weight"]
  return {"loss_sum": jnp.sum(loss * w), "correct_sum": jnp.sum(correct * w), "count": jnp.sum(w)}


def make_steps(model: nn.Module, mesh: jax.sharding.Mesh, dropout_seed: int):
  """Jitted train and eval steps: batch sharded over `data`, state replicated."""
  replicated = NamedSharding(mesh, P())
  base_key = jax.random.PRNGKey(dropout_seed)

  def train_step(state: TrainState, batch):
    # Dropout depends on (seed, step) only: a resumed run draws the same masks.
    key = jax.random.fold_in(base_key, state.step)

    def loss_fn(params):
      logits = model.apply({"params": params}, batch, deterministic=False, rngs={"dropout": key})
      sums = _weighted_metrics(logits, batch)
      return sums["loss_sum"] / jnp.maximum(sums["count"], 1.0), sums

    (_, sums), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    sums["grad_norm"] = optax.global_norm(grads)
    return state.apply_gradients(grads=grads), sums

  def eval_step(state: TrainState, batch):
    return _weighted_metrics(model.apply({"params": state.params}, batch, deterministic=True),
                             batch)

  return (jax.jit(train_step, out_shardings=(replicated, replicated), donate_argnums=0),
          jax.jit(eval_step, out_shardings=replicated))


def evaluate(eval_step, state, data: PreparedData, split: str, batch_size: int,
             shard) -> dict[str, float]:
  totals = {"loss_sum": 0.0, "correct_sum": 0.0, "count": 0.0}
  for batch in eval_batches(data.split(split), data.spec, batch_size):
    sums = jax.device_get(eval_step(state, shard(batch)))
    for key in totals:
      totals[key] += float(sums[key])
  count = max(totals["count"], 1.0)
  return {f"{split}/loss": totals["loss_sum"] / count,
          f"{split}/accuracy": totals["correct_sum"] / count,
          f"{split}/num_examples": int(totals["count"])}


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

  Resumes from the latest checkpoint in `run_dir` if there is one. Returns final.json's dict.
  """
  run_dir = Path(run_dir)
  run_dir.mkdir(parents=True, exist_ok=True)
  spec, tc = data.spec, config.train
  # A plain Mesh has auto (compiler-chosen) sharding for everything but the batch we place.
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()), ("data",))
  if tc.batch_size % jax.device_count() or config.eval.batch_size % jax.device_count():
    raise ValueError(f"train.batch_size={tc.batch_size} and eval.batch_size="
                     f"{config.eval.batch_size} must be multiples of the {jax.device_count()} "
                     "devices")
  batch_sharding = NamedSharding(mesh, P("data"))
  shard = lambda batch: jax.device_put(batch, batch_sharding)  # noqa: E731

  model = build_model(config, spec)
  params = jax.jit(lambda key: model.init(key, _example_batch(spec, 1), deterministic=True))(
      jax.random.PRNGKey(tc.seed))["params"]
  state = TrainState.create(apply_fn=model.apply, params=params,
                            tx=optim.make_optimizer(tc))
  state = jax.device_put(state, NamedSharding(mesh, P()))
  num_params = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params))
  train_step, eval_step = make_steps(model, mesh, dropout_seed=tc.seed + 1)

  ckpt = checkpoints.Checkpointer(run_dir)
  start_step = ckpt.latest_step() or 0
  best = {"step": -1, "val/accuracy": -1.0, "test/accuracy": None}
  if start_step:
    state, best = ckpt.restore(start_step, jax.tree.map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), state))
  writers.write_json_atomic(run_dir / "config.json", config.to_dict())
  writer = writers.MetricsWriter(run_dir / "metrics.jsonl", start_step if start_step else None)
  env = writers.environment()
  baselines = label_baselines(data)
  bar = Progress(tc.num_steps, enabled=progress)
  if start_step:
    bar.message(f"resuming {run_dir} from step {start_step}")

  def final(status: str, step: int, last_test: float | None, wall: float, rate: float):
    result = {
        "status": status, "task": config.task, "mixer": config.model.mixer,
        "preset": config.preset, "seed": tc.seed, "step": step, "num_steps": tc.num_steps,
        "best_step": best["step"], "val_accuracy": best["val/accuracy"],
        "test_accuracy": best["test/accuracy"], "test_accuracy_last": last_test,
        **baselines, "num_params": num_params, "steps_per_s": rate, "wall_time_s": wall,
        "seq_len": spec.seq_len, "data": {k: data.meta.get(k) for k in ("splits", "source")},
        **env,
    }
    writers.write_json_atomic(run_dir / "final.json", result)
    return result

  stream = train_batches(data.split("train"), spec, tc.batch_size, tc.seed, start_step)
  add = jax.jit(lambda a, b: jax.tree.map(jnp.add, a, b))
  window, window_steps = None, 0
  started = window_start = time.time()
  previous_wall = float(best.pop("wall_time_s", 0.0))
  wall = lambda: previous_wall + time.time() - started  # noqa: E731
  step, last_test, rate = start_step, None, 0.0
  final("running", step, None, previous_wall, 0.0)
  while step < tc.num_steps:
    state, sums = train_step(state, shard(next(stream)))
    # Summed on the device; fetched only at log points so the host never waits in between.
    window = sums if window is None else add(window, sums)
    step += 1
    window_steps += 1
    if step % tc.log_every_steps == 0 or step == tc.num_steps:
      totals = jax.device_get(window)
      rate = window_steps / (time.time() - window_start)
      count = max(float(totals["count"]), 1.0)
      metrics = {"train/loss": float(totals["loss_sum"]) / count,
                 "train/accuracy": float(totals["correct_sum"]) / count,
                 "train/grad_norm": float(sums["grad_norm"]), "train/steps_per_s": rate}
      writer.write(step, metrics)
      bar.show(step, metrics, rate)
      if not math.isfinite(metrics["train/loss"]):
        bar.message(f"loss is {metrics['train/loss']} at step {step}: stopping (diverged)")
        return final("diverged", step, None, wall(), rate)
      window, window_steps, window_start = None, 0, time.time()
    if step % config.eval.every_steps == 0 or step == tc.num_steps:
      val = evaluate(eval_step, state, data, "val", config.eval.batch_size, shard)
      if val["val/accuracy"] > best["val/accuracy"]:
        test = evaluate(eval_step, state, data, "test", config.eval.batch_size, shard)
        best = {"step": step, "val/accuracy": val["val/accuracy"],
                "test/accuracy": test["test/accuracy"]}
        val.update(test)
      if step == tc.num_steps:
        last_test = (val["test/accuracy"] if "test/accuracy" in val else
                     evaluate(eval_step, state, data, "test", config.eval.batch_size,
                              shard)["test/accuracy"])
      writer.write(step, val)
      bar.message(f"step {step}: val accuracy {val['val/accuracy']:.4f} "
                  f"(best {best['val/accuracy']:.4f} at step {best['step']})")
      window_start = time.time()  # eval time is not training throughput
    if step % config.checkpoint.every_steps == 0 or step == tc.num_steps:
      ckpt.save(step, state, {**best, "wall_time_s": wall()})
  ckpt.wait()
  ckpt.close()
  return final("complete", step, last_test, wall(), rate)
