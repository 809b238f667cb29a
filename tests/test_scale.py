"""Training at scale and under faults: device counts, accumulation, bf16, remat, kills, Ctrl-C.

Runs with several (fake CPU) devices or that must be killed go through a subprocess, since the
device count is fixed when JAX starts.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lra.runs.config_loading import data_cache_dir, resolve_config
from lra.models.build import build_model
from lra import run
from lra.machine import distributed
from lra.training import objectives, train
from lra.runs.writers import read_metrics
from lra.tasks.contract.batches import Batching, eval_batches, split_batch, train_batches
from lra.tasks.contract.cache import PreparedData

ROOT = Path(__file__).resolve().parents[1]


def _smoke_data(data_dir):
  return PreparedData(data_cache_dir(resolve_config("listops", "softmax", "smoke"),
                                         data_dir))


def _lra(args, devices=1, **popen):
  env = dict(os.environ)
  env["XLA_FLAGS"] = (f"--xla_force_host_platform_device_count={devices} "
                      "--xla_cpu_multi_thread_eigen=false")
  env["JAX_PLATFORMS"] = "cpu"
  return subprocess.Popen([sys.executable, "-m", "lra", "run", "listops", "softmax", "--preset",
                           "smoke", "--quiet", *args], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _finish(proc, timeout=600):
  out, err = proc.communicate(timeout=timeout)
  return proc.returncode, out, err


def _rows(run_dir):
  """metrics.jsonl without the timing column."""
  return [{k: v for k, v in r.items() if k != "train/steps_per_s"}
          for r in read_metrics(run_dir / "metrics.jsonl")]


SCORES = ("status", "step", "best_step", "val_accuracy", "test_accuracy", "test_accuracy_last")


@pytest.mark.slow  # four CLI subprocesses, each compiling: minutes on a shared 2-core machine
def test_one_and_four_devices_give_the_same_losses(data_dir, tmp_path):
  # eval.batch_size 24 on 64 examples: the last batch has 8 weight-0 rows, 2 per device.
  common = ["--data-dir", str(data_dir), "--config.train.num_steps=8",
            "--config.train.log_every_steps=1", "--config.eval.every_steps=4",
            "--config.eval.batch_size=24"]
  # Per-batch padding (dropout is 0 in smoke) changes shapes only: the same losses on 4 devices.
  runs = {"1dev": (1, []), "4dev": (4, []),
          "4dev_accum2": (4, ["--config.train.grad_accum_steps=2"]),
          "4dev_per_batch": (4, ["--config.data.padding=batch", "--config.data.pad_quantum=8"]),
          # The global batch sorted, then each of its micro-batches shared by the 4 devices.
          "4dev_sorted2": (4, ["--config.data.padding=sorted", "--config.data.pad_quantum=8",
                               "--config.train.grad_accum_steps=2"])}
  for name, (devices, extra) in runs.items():
    code, _, err = _finish(_lra([*common, *extra, "--run-dir", str(tmp_path / name)], devices))
    assert code == 0, err
  reference = _rows(tmp_path / "1dev")
  assert len([r for r in reference if "train/loss" in r]) == 8
  for name in ("4dev", "4dev_accum2", "4dev_per_batch", "4dev_sorted2"):
    final = json.loads((tmp_path / name / "final.json").read_text())
    assert final["num_devices"] == 4
    rows = _rows(tmp_path / name)
    assert [sorted(r) for r in rows] == [sorted(r) for r in reference]
    for got, want in zip(rows, reference):
      for key, value in want.items():
        if key.endswith("num_examples"):
          assert got[key] == value == 64  # every example counted once
        else:
          assert got[key] == pytest.approx(value, rel=2e-4, abs=1e-5), (name, key, got["step"])


def _wait_for_checkpoint(run_dir, proc, after=0, timeout=600):
  """Polls for a finished checkpoint newer than `after` (Orbax renames it into place at the end)."""
  deadline = time.time() + timeout
  while time.time() < deadline:
    done = [int(p.name) for p in (run_dir / "checkpoints").glob("*") if p.name.isdigit()]
    if done and max(done) > after:
      return max(done)
    assert proc.poll() is None, f"the run ended before a checkpoint: {proc.communicate()}"
    time.sleep(0.02)
  raise TimeoutError(run_dir)


# Length buckets and sorted micro-batches (smoke lengths 1-32 in quanta of 8: four batch shapes)
# must resume as exactly.
BATCHING = {"fixed": [], "bucketing": ["data.padding=batch", "data.pad_quantum=8",
                                       "data.bucketing=True"],
            "sorted": ["data.padding=sorted", "data.pad_quantum=8", "train.grad_accum_steps=2"]}


@pytest.mark.slow  # three CLI subprocesses and a reference run
@pytest.mark.parametrize("batching", sorted(BATCHING))
def test_sigkill_and_sigint_then_resume_give_identical_scores(data_dir, tmp_path, batching):
  overrides = ["train.num_steps=400", "checkpoint.every_steps=20", "train.log_every_steps=7",
               "eval.every_steps=50", *BATCHING[batching]]
  args = ["--data-dir", str(data_dir), *(f"--config.{o}" for o in overrides)]
  faulty = tmp_path / "faulty"

  killed = _lra([*args, "--run-dir", str(faulty)])
  _wait_for_checkpoint(faulty, killed)
  killed.send_signal(signal.SIGKILL)
  code, _, _ = _finish(killed)
  assert code == -signal.SIGKILL, "the run ended before the kill; give it more steps"
  assert json.loads((faulty / "final.json").read_text())["status"] == "running"

  interrupted = _lra([*args, "--run-dir", str(faulty)])
  first = _wait_for_checkpoint(faulty, interrupted, after=0)
  _wait_for_checkpoint(faulty, interrupted, after=first)
  interrupted.send_signal(signal.SIGINT)
  code, out, err = _finish(interrupted)
  final = json.loads((faulty / "final.json").read_text())
  assert code == 130 and "resuming" not in out, err
  assert final["status"] == "interrupted" and 0 < final["step"] < 400, err
  saved = [int(p.name) for p in (faulty / "checkpoints").glob("*") if p.name.isdigit()]
  assert max(saved) == final["step"]  # saved where it stopped, not only at every_steps
  assert max(r["step"] for r in read_metrics(faulty / "metrics.jsonl")) <= final["step"]

  code, _, err = _finish(_lra([*args, "--run-dir", str(faulty)]))
  assert code == 0, err
  clean = tmp_path / "clean"
  reference = run.run("listops", "softmax", preset="smoke", overrides=overrides,
                      data_dir=data_dir, run_dir=clean, progress=False)
  resumed = json.loads((faulty / "final.json").read_text())
  assert {k: resumed[k] for k in SCORES} == {k: reference[k] for k in SCORES}
  assert resumed["status"] == "complete"
  assert resumed["batching"]["bucketing"] == (batching == "bucketing")
  assert _rows(faulty) == _rows(clean)  # every loss, accuracy and eval line, bit for bit
  assert (faulty / "checkpoints" / "best" / str(reference["best_step"])).is_dir()
  assert not list(faulty.glob("*.tmp"))


def _smoke_state(tmp_path, data_dir, overrides=(), tx=None):
  config = resolve_config("listops", "latte", "smoke", ["model.dropout=0.0", *overrides])
  data = _smoke_data(data_dir)
  model = build_model(config, data.spec)
  params = model.init(jax.random.PRNGKey(0), train.example_batch(data.spec, 1),
                      deterministic=True)["params"]
  state = train.TrainState.create(apply_fn=model.apply, params=params,
                                  tx=tx or optax.adamw(1e-3))
  batch = next(train_batches(data.split("train"), data.spec, 16, seed=0))
  return config, data, model, state, batch


@pytest.mark.usefixtures("highest_precision")  # micro-batches may compile to other kernels
def test_accumulating_micro_batches_equals_one_larger_batch(data_dir, tmp_path):
  # Plain SGD with rate 1, so the parameter change is the gradient itself (Adam's first step is
  # about lr * sign(g), which magnifies float noise in near-zero gradients).
  _, data, model, state, batch = _smoke_state(tmp_path, data_dir, tx=optax.sgd(1.0))
  batch["weight"][[3, 10]] = 0.0  # weight-0 rows must not count, whichever micro-batch has them
  mesh = distributed.data_mesh()
  results = {}
  step, _ = train.make_steps(model, mesh, dropout_seed=1)
  for k in (1, 4):
    copy = jax.tree.map(jnp.array, state)  # the step donates its input
    micro = split_batch(batch, Batching(micro_batches=k), data.spec.seq_len)
    results[k] = jax.device_get(step(copy, micro))
  (one, sums_one), (four, sums_four) = results[1], results[4]
  assert sums_four["count"] == sums_one["count"] == 14
  for key in ("loss_sum", "correct_sum", "grad_norm"):
    np.testing.assert_allclose(sums_four[key], sums_one[key], rtol=1e-5)
  start = jax.device_get(state.params)
  delta = lambda new: jax.tree.map(np.subtract, new.params, start)  # noqa: E731
  assert max(np.abs(d).max() for d in jax.tree.leaves(delta(one))) > 1e-4  # it did something
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-6),
               delta(four), delta(one))


@pytest.mark.usefixtures("highest_precision")
def test_remat_recomputes_blocks_without_changing_the_maths(data_dir, tmp_path):
  grads = {}
  for remat in (False, True):
    _, _, model, state, batch = _smoke_state(tmp_path, data_dir, [f"model.remat={remat}"])
    loss = lambda p: jnp.sum(objectives.classification_sums(  # noqa: E731
        model.apply({"params": p}, batch, deterministic=True), batch)["loss_sum"])
    # Jitted: one compile costs seconds where the eager backward pass, op by op, cost ~20.
    grads[remat] = jax.jit(jax.grad(loss))(state.params)
    assert ("remat" in str(jax.make_jaxpr(jax.grad(loss))(state.params))) == remat
  # float32: recomputing a block fuses its ops otherwise, so sums may round differently (~1e-7
  # on gradients of ~0.1-1); a change in the maths would move them by far more.
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               grads[True], grads[False])


def test_bfloat16_computes_in_bf16_keeps_float32_parameters(data_dir, tmp_path):
  _, _, model, state, batch = _smoke_state(tmp_path, data_dir, ["model.dtype=bfloat16"])
  assert {a.dtype for a in jax.tree.leaves(state.params)} == {jnp.dtype(jnp.float32)}
  forward = lambda m: jax.jit(lambda p: m.apply({"params": p}, batch, deterministic=True))  # noqa: E731
  logits = forward(model)(state.params)
  assert logits.dtype == jnp.float32
  jaxpr = str(jax.make_jaxpr(forward(model))(state.params))
  assert "bf16" in jaxpr and "dot_general" in jaxpr
  grads = jax.jit(jax.grad(lambda p: jnp.sum(forward(model)(p))))(state.params)
  assert {a.dtype for a in jax.tree.leaves(grads)} == {jnp.dtype(jnp.float32)}
  # Same model in float32 gives close logits: the cast is a precision change, not a bug.
  _, _, model32, _, _ = _smoke_state(tmp_path, data_dir)
  np.testing.assert_allclose(logits, forward(model32)(state.params), atol=0.1)


def test_bfloat16_training_learns_listops_smoke(data_dir, tmp_path):
  result = run.run("listops", "latte", preset="smoke", data_dir=data_dir, run_dir=tmp_path / "r",
                   progress=False, overrides=["model.dtype=bfloat16", "train.num_steps=300",
                                              "train.log_every_steps=25", "eval.every_steps=100",
                                              "checkpoint.every_steps=300"])
  losses = [r["train/loss"] for r in read_metrics(tmp_path / "r" / "metrics.jsonl")
            if "train/loss" in r]
  assert result["status"] == "complete" and result["dtype"] == "bfloat16"
  assert losses[-1] < losses[0] - 0.5, losses
  assert result["val_accuracy"] > 0.2 and result["test_accuracy"] > result[
      "majority_accuracy"] + 0.1


def test_non_finite_loss_stops_with_diverged(data_dir, tmp_path):
  result = run.run("listops", "softmax", preset="smoke", data_dir=data_dir,
                   run_dir=tmp_path / "r", progress=False,
                   overrides=["train.learning_rate=1e30", "train.grad_clip_norm=0.0",
                              "train.num_steps=50", "train.log_every_steps=2"])
  assert result["status"] == "diverged" and result["step"] < 50 and result["step"] % 2 == 0
  losses = [r["train/loss"] for r in read_metrics(tmp_path / "r" / "metrics.jsonl")
            if "train/loss" in r]
  assert not np.isfinite(losses[-1]) and np.isfinite(losses[:-1]).all()
  assert json.loads((tmp_path / "r" / "final.json").read_text())["status"] == "diverged"


def test_host_slices_of_batches_rebuild_the_global_batch(data_dir):
  data = _smoke_data(data_dir)
  shards = [(0, 8), (8, 16), (16, 24)]  # three hosts, eight rows each
  test = data.split("test")
  whole = list(eval_batches(test, data.spec, 24))
  parts = [list(eval_batches(test, data.spec, 24, rows)) for rows in shards]
  assert parts[2][-1]["weight"].sum() == 0  # the last host's share of the last batch is filler
  for index, batch in enumerate(whole):
    for key, value in batch.items():
      np.testing.assert_array_equal(np.concatenate([p[index][key] for p in parts]), value)
  assert sum(b["weight"].sum() for p in parts for b in p) == len(test["label"])
  stream = train_batches(data.split("train"), data.spec, 24, seed=3, start_step=9)
  streams = [train_batches(data.split("train"), data.spec, 24, 3, 9, rows) for rows in shards]
  for _ in range(12):  # crosses an epoch boundary (256 // 24 = 10 batches per epoch)
    batch = next(stream)
    pieces = [next(s) for s in streams]
    for key, value in batch.items():
      np.testing.assert_array_equal(np.concatenate([p[key] for p in pieces]), value)


def test_batch_sizes_that_do_not_divide_say_what_to_pass(data_dir, tmp_path):
  with pytest.raises(ValueError, match="grad_accum_steps|multiple of 3"):
    run.run("listops", "softmax", preset="smoke", data_dir=data_dir, run_dir=tmp_path / "r",
            progress=False, overrides=["train.grad_accum_steps=3"])
