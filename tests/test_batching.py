"""Per-batch padding, length bucketing and sorted micro-batches: same examples, fewer pads, the
same maths."""
import dataclasses
import json

import jax
import numpy as np
import optax
import pytest
from flax.training.train_state import TrainState

from lra import run
from lra.machine import distributed
from lra.training import train
from lra.configs.common import base_config
from lra.models.build import build_model
from lra.models.mixers import MIXERS
from lra.tasks.contract.batches import (Batching, epoch_plan, eval_batches, example_lengths,
                                        indexed_eval_batches, make_batch, split_batch, step_batches,
                                        train_batches)
from lra.tasks.contract.spec import TaskSpec
from lra.runs.writers import read_metrics

SPEC = TaskSpec(vocab_size=12, seq_len=40, num_classes=3)
# Cheap XLA compiles (the maths is the same; the shared CPU is not): each shape compiles anew.
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
PER_BATCH = Batching(padding="batch", quantum=16)
BUCKETS = Batching(padding="batch", quantum=16, bucketing=True)
SORTED = Batching(padding="sorted", quantum=16, micro_batches=2)


def _arrays(n, spec=SPEC, seed=0, low=1):
  """Random tokens with pads after a random length in [low, T]; dual specs get two documents."""
  rng = np.random.default_rng(seed)
  arrays = {}
  for key in (("inputs1", "inputs2") if spec.dual else ("inputs",)):
    lengths = rng.integers(low, spec.seq_len + 1, n)
    tokens = rng.integers(1, spec.vocab_size, (n, spec.seq_len)).astype(np.uint16)
    tokens[np.arange(spec.seq_len)[None] >= lengths[:, None]] = 0
    arrays[key] = tokens
  arrays["label"] = rng.integers(0, spec.num_classes, n).astype(np.int32)
  return arrays


@pytest.mark.parametrize("batching", [Batching(), BUCKETS, Batching(padding="sorted", quantum=16)],
                         ids=["fixed", "bucketing", "sorted"])
def test_indexed_eval_batches_name_the_examples_of_their_rows(batching):
  """Row r < len(indices) of each batch is example indices[r] (what `lra eval --predictions`
  relies on to put each prediction back in data order); every example appears once."""
  arrays = _arrays(45)
  seen = []
  for indices, batch in indexed_eval_batches(arrays, SPEC, 16, batching=batching):
    real = len(indices)
    assert batch["weight"][:real].all() and not batch["weight"][real:].any()
    np.testing.assert_array_equal(batch["label"][:real], arrays["label"][indices])
    width = batch["inputs"].shape[1]
    np.testing.assert_array_equal(batch["inputs"][:real], arrays["inputs"][indices, :width])
    seen.extend(indices)
  assert sorted(seen) == list(range(45))
  if batching.padding != "fixed":
    assert seen != sorted(seen)  # length order, so the indices carry information


def test_padded_length_is_the_longest_rounded_up_to_the_quantum_at_most_t():
  assert [PER_BATCH.padded_length(m, 40) for m in (0, 1, 16, 17, 32, 33, 40)] == [
      16, 16, 16, 32, 32, 40, 40]
  assert Batching().padded_length(3, 40) == 40  # fixed padding ignores the batch
  with pytest.raises(ValueError, match="pad_quantum=32 or more"):
    Batching(padding="batch", quantum=8).check(2000)  # 250 shapes, 250 compiles
  with pytest.raises(ValueError, match="data.padding=batch"):
    Batching(bucketing=True).check(40)


def test_example_lengths_end_at_the_last_real_token():
  tokens = np.array([[3, 0, 5, 0, 0], [0, 0, 0, 0, 0], [1, 2, 3, 4, 5]], np.uint16)
  other = np.array([[1, 0, 0, 0, 0], [0, 0, 7, 0, 0], [1, 0, 0, 0, 0]], np.uint16)
  spec = TaskSpec(vocab_size=8, seq_len=5, num_classes=2)
  np.testing.assert_array_equal(example_lengths({"inputs": tokens}, spec, chunk=2), [3, 0, 5])
  dual = TaskSpec(vocab_size=8, seq_len=5, num_classes=2, dual=True)
  np.testing.assert_array_equal(
      example_lengths({"inputs1": tokens, "inputs2": other}, dual, chunk=2), [3, 3, 5])
  pixels = TaskSpec(vocab_size=256, seq_len=5, num_classes=2, pad_id=None)
  np.testing.assert_array_equal(example_lengths({"inputs": tokens}, pixels), [5, 5, 5])


@pytest.mark.parametrize("dual", [False, True])
def test_per_batch_padding_keeps_every_batch_and_cuts_only_pads(dual):
  spec = TaskSpec(vocab_size=12, seq_len=40, num_classes=3, dual=dual)
  arrays = _arrays(50, spec)
  keys = ("inputs1", "inputs2") if dual else ("inputs",)
  fixed = train_batches(arrays, spec, 8, seed=1)
  cut = train_batches(arrays, spec, 8, seed=1, batching=PER_BATCH)
  widths = set()
  for _ in range(14):  # two epochs of 6 batches and a bit
    a, b = next(fixed), next(cut)
    t = b[keys[0]].shape[1]
    widths.add(t)
    np.testing.assert_array_equal(a["label"], b["label"])
    for key in keys:  # both documents of a pair padded to one T
      assert b[key].shape[1] == t and b["mask" + key[6:]].shape[1] == t
      np.testing.assert_array_equal(a[key][:, :t], b[key])
      assert (a[key][:, t:] == 0).all()  # nothing real was cut
    longest = max(int(np.flatnonzero(row).max()) + 1 for k in keys for row in a[k] if row.any())
    assert t == min(40, -(-longest // 16) * 16)
  assert widths <= {16, 32, 40}


def test_bucketing_plans_a_seeded_epoch_of_the_same_examples_with_fewer_pads():
  arrays = _arrays(1000)
  lengths = example_lengths(arrays, SPEC)
  plain, plain_t = epoch_plan(lengths, SPEC, 16, seed=3, epoch=0, batching=PER_BATCH)
  grouped, grouped_t = epoch_plan(lengths, SPEC, 16, seed=3, epoch=0, batching=BUCKETS)
  assert grouped.shape == plain.shape == (62, 16)  # as many steps, the same examples dropped
  np.testing.assert_array_equal(np.sort(grouped.ravel()), np.sort(plain.ravel()))
  assert set(grouped_t.ravel()) <= {16, 32, 40}
  buckets = -(-lengths[grouped] // 16)
  mixed = (buckets.min(1) != buckets.max(1)).sum()
  assert mixed <= 2  # only the buckets' remainders share a batch (3 buckets)
  assert grouped_t.mean() < 0.9 * plain_t.mean()
  again, _ = epoch_plan(lengths, SPEC, 16, seed=3, epoch=0, batching=BUCKETS)
  np.testing.assert_array_equal(again, grouped)
  other, _ = epoch_plan(lengths, SPEC, 16, seed=3, epoch=1, batching=BUCKETS)
  assert not np.array_equal(other, grouped)


@pytest.mark.parametrize("batching", [PER_BATCH, BUCKETS], ids=["per_batch", "bucketing"])
def test_every_host_reads_its_rows_of_the_same_global_batch_and_resume_is_exact(batching):
  arrays = _arrays(100)
  shards = [(0, 4), (4, 8), (8, 12)]  # three hosts
  whole = train_batches(arrays, SPEC, 12, seed=5, batching=batching)
  for _ in range(9):
    next(whole)
  resumed = train_batches(arrays, SPEC, 12, 5, 9, batching=batching)
  hosts = [train_batches(arrays, SPEC, 12, 5, 9, rows, batching) for rows in shards]
  for _ in range(10):  # crosses an epoch boundary (100 // 12 = 8 steps per epoch)
    batch, again = next(whole), next(resumed)
    pieces = [next(h) for h in hosts]
    for key, value in batch.items():
      np.testing.assert_array_equal(again[key], value)
      np.testing.assert_array_equal(np.concatenate([p[key] for p in pieces]), value)


@pytest.mark.parametrize("batching", [PER_BATCH, BUCKETS, SORTED],
                         ids=["per_batch", "bucketing", "sorted"])
def test_eval_counts_every_example_once_on_any_host_split(batching):
  arrays = _arrays(45)
  shards = [(0, 8), (8, 16)]
  hosts = [list(eval_batches(arrays, SPEC, 16, rows, batching)) for rows in shards]
  whole = list(eval_batches(arrays, SPEC, 16, batching=batching))
  assert len(whole) == 3 and sum(b["weight"].sum() for b in whole) == 45
  for index, batch in enumerate(whole):
    for key, value in batch.items():
      np.testing.assert_array_equal(np.concatenate([h[index][key] for h in hosts]), value)
  real = np.concatenate([b["inputs"][b["weight"] > 0].sum(1) for b in whole])
  np.testing.assert_array_equal(np.sort(real), np.sort(arrays["inputs"].astype(np.int64).sum(1)))
  labels = np.concatenate([b["label"][b["weight"] > 0] for b in whole])
  np.testing.assert_array_equal(np.bincount(labels, minlength=3),
                                np.bincount(arrays["label"], minlength=3))


# --- Same maths: every mixer gives the same losses and accuracies under per-batch padding. -----

def _config(mixer, **model):
  c = base_config("batching", "test", mixer, tokens=False)
  c.model.mixer, c.model.num_layers, c.model.dim, c.model.num_heads = mixer, 1, 16, 2
  c.model.mlp_dim, c.model.dropout = 32, 0.0  # dropout masks are drawn per shape
  for key, value in model.items():
    c.model[key] = value
  small = {"num_latents": 4, "num_features": 8, "proj_len": 8, "packed_len": 4, "window": 8,
           "block": 8, "chunk_len": 8,
           "gumbel_noise": False}  # Sinkhorn's training noise is drawn per shape, as dropout's
  for block in c.mixers.values():
    for key, value in small.items():
      if key in block:
        block[key] = value
  return c


CASES = {**{name: (name, {}, False) for name in sorted(MIXERS)},
         # Learned positions and the CLS token (one more position); both documents of a pair.
         "latte+cls+learned": ("latte", {"pooling": "cls", "pos_encoding": "learned"}, False),
         "linformer+cls": ("linformer", {"pooling": "cls"}, False),
         "latte+dual": ("latte", {}, True)}


def _per_shape(jitted):
  """`jitted`, compiled with FAST_COMPILE once per set of argument shapes."""
  programs = {}

  def call(*args):
    key = str(jax.tree.map(np.shape, args))
    if key not in programs:
      programs[key] = jitted.lower(*args).compile(FAST_COMPILE)
    return programs[key](*args)
  return call


def _case(case):
  """The model of a case, its initial parameters, and train and eval data of lengths <= 30 (so
  per-batch padding cuts every batch from 40 to 32 positions: one shape per mode)."""
  mixer, model_overrides, dual = CASES[case]
  spec = TaskSpec(vocab_size=12, seq_len=40, num_classes=3, dual=dual)
  model = build_model(_config(mixer, **model_overrides), spec)
  params = _per_shape(jax.jit(lambda key: model.init(key, train.example_batch(spec, 1),
                                                    deterministic=True)))(jax.random.PRNGKey(0))
  train_arrays, eval_arrays = _arrays(24, spec, seed=1, low=5), _arrays(10, spec, seed=2, low=5)
  for arrays in (train_arrays, eval_arrays):
    for key in arrays:
      if key != "label":
        arrays[key][:, 30:] = 0
  return spec, model, params, train_arrays, eval_arrays


@pytest.mark.usefixtures("highest_precision")  # T=40 and T=32 may compile to other kernels
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_mixer_scores_a_batch_cut_to_its_length_as_the_full_batch(case):
  spec, model, params, arrays, _ = _case(case)
  forward = _per_shape(jax.jit(lambda p, b: model.apply(p, b, deterministic=True)))
  fixed = make_batch(arrays, np.arange(12), spec)
  cut = make_batch(arrays, np.arange(12), spec, length=PER_BATCH.padded_length(30, 40))
  assert cut["mask1" if spec.dual else "mask"].shape == (12, 32)
  want, got = np.asarray(forward(params, fixed)), np.asarray(forward(params, cut))
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
  np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))  # the same accuracy


# Training steps compile the backward pass per shape: one case by default, all of them with -m slow.
@pytest.mark.parametrize("case", [c if c == "latte+cls+learned" else
                                  pytest.param(c, marks=pytest.mark.slow) for c in sorted(CASES)])
@pytest.mark.usefixtures("highest_precision")
def test_per_batch_padding_trains_with_the_fixed_padding_losses_and_accuracies(case):
  spec, model, params, train_arrays, eval_arrays = _case(case)
  train_step, eval_step = map(_per_shape, train.make_steps(model, distributed.data_mesh(), 1))
  results = {}
  for name, batching in (("fixed", Batching()), ("batch", PER_BATCH)):
    state = TrainState.create(apply_fn=model.apply, params=jax.tree.map(np.array, params)["params"],
                              tx=optax.adamw(1e-2))
    stream = train_batches(train_arrays, spec, 8, seed=0, batching=batching)
    sums = []
    for _ in range(3):
      batch = next(stream)
      state, step_sums = train_step(state, batch)
      sums.append(jax.device_get(step_sums))
    evals = [jax.device_get(eval_step(state, b))
             for b in eval_batches(eval_arrays, spec, 5, batching=batching)]
    results[name] = sums, evals, batch["label"].shape, batch["mask1" if spec.dual else "mask"].shape
  (fixed_sums, fixed_evals, *fixed_shapes), (cut_sums, cut_evals, *cut_shapes) = (
      results["fixed"], results["batch"])
  assert fixed_shapes == [(8,), (8, 40)] and cut_shapes == [(8,), (8, 32)]
  for got, want in zip(cut_sums + cut_evals, fixed_sums + fixed_evals):
    assert got["correct_sum"] == want["correct_sum"] and got["count"] == want["count"]
    np.testing.assert_allclose(got["loss_sum"], want["loss_sum"], rtol=1e-4, atol=1e-5)
  assert fixed_sums[0]["loss_sum"] != fixed_sums[2]["loss_sum"]  # the steps trained something


def test_a_run_records_its_batching_and_evaluates_every_example(tmp_path):
  # Smoke ListOps has lengths 1-32: quantum 16 gives two batch shapes.
  result = run.run("listops", "softmax", preset="smoke", data_dir=tmp_path / "data",
                   run_dir=tmp_path / "run", progress=False,
                   overrides=["train.num_steps=4", "eval.every_steps=4", "checkpoint.every_steps=4",
                              "data.padding=batch",
                              "data.pad_quantum=16", "data.bucketing=True"])
  final = json.loads((tmp_path / "run" / "final.json").read_text())
  assert final["status"] == "complete"
  assert final["batching"] == {"padding": "batch", "quantum": 16, "bucketing": True,
                               "micro_batches": 1}
  rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
  assert [r["test/num_examples"] for r in rows if "test/num_examples" in r] == [64]
  assert result == {**final, "run_dir": str(tmp_path / "run")}


# --- Sorted micro-batches: the protocol's batch, cut by length into k, one update. --------------

def test_sorted_micro_batches_keep_each_batch_and_cut_it_by_length():
  arrays = _arrays(1000)
  lengths = example_lengths(arrays, SPEC)
  drawn, drawn_t = epoch_plan(lengths, SPEC, 16, seed=3, epoch=0, batching=PER_BATCH)
  cut, cut_t = epoch_plan(lengths, SPEC, 16, seed=3, epoch=0,
                          batching=dataclasses.replace(SORTED, micro_batches=4))
  assert cut.shape == drawn.shape == (62, 16)
  assert cut_t.shape == (62, 4) and drawn_t.shape == (62, 1)
  # The protocol's batches, step by step: the same examples, only their rows reordered.
  np.testing.assert_array_equal(np.sort(cut, 1), np.sort(drawn, 1))
  assert (np.diff(lengths[cut], axis=1) >= 0).all()  # by length within each batch
  longest = lengths[cut].reshape(62, 4, 4).max(2)  # micro-batch i: rows 4i..4i+3
  assert cut_t.tolist() == [[SORTED.padded_length(int(m), 40) for m in row] for row in longest]
  np.testing.assert_array_equal(cut_t[:, -1], drawn_t[:, 0])  # the last holds the batch's longest
  assert (cut_t * 4).sum() < 0.8 * (drawn_t * 16).sum()  # tokens computed: far fewer
  # Without sorting, micro-batch i takes rows i, i + k, ... of the drawn batch at the batch's T.
  fixed, fixed_t = epoch_plan(lengths, SPEC, 16, seed=3, epoch=0,
                              batching=Batching(micro_batches=4))
  np.testing.assert_array_equal(fixed.reshape(62, 4, 4), drawn.reshape(62, 4, 4).transpose(0, 2, 1))
  assert (fixed_t == 40).all()


def test_every_host_reads_its_rows_of_each_micro_batch_and_resume_is_exact():
  arrays = _arrays(100)
  batching = dataclasses.replace(SORTED, micro_batches=3)
  shards = [(0, 2), (2, 4)]  # two hosts, each with 2 of every micro-batch's 4 rows
  whole = train_batches(arrays, SPEC, 12, seed=5, batching=batching)
  steps = step_batches(arrays, SPEC, 12, seed=5, batching=batching)
  for _ in range(9):
    next(steps), next(whole)
  resumed = step_batches(arrays, SPEC, 12, 5, 9, batching=batching)
  hosts = [step_batches(arrays, SPEC, 12, 5, 9, rows, batching) for rows in shards]
  for _ in range(10):  # crosses an epoch boundary (100 // 12 = 8 steps per epoch)
    micro, again, batch = next(steps), next(resumed), next(whole)
    pieces = [next(h) for h in hosts]
    assert len(micro) == 3 and [m["inputs"].shape[1] for m in micro] == sorted(
        m["inputs"].shape[1] for m in micro)
    for i, part in enumerate(micro):
      for key, value in part.items():
        np.testing.assert_array_equal(again[i][key], value)
        np.testing.assert_array_equal(np.concatenate([p[i][key] for p in pieces]), value)
    # The whole batch is the micro-batches' rows, in their order, at the batch's T.
    np.testing.assert_array_equal(np.concatenate([m["label"] for m in micro]), batch["label"])
    assert batch["inputs"].shape[1] == micro[-1]["inputs"].shape[1]


def _split_step(model):
  """make_steps' train step, each of its programs compiled with FAST_COMPILE per shape."""
  step, _ = train.make_steps(model, distributed.data_mesh(), 1)
  return dataclasses.replace(step, whole=_per_shape(step.whole),
                             accumulate=_per_shape(step.accumulate), update=_per_shape(step.update))


# Every mixer: the whole batch and its two micro-batches compile separately (about 10 s a mixer on
# a free core), so the paper's two mixers by default and all of them with -m slow.
@pytest.mark.usefixtures("highest_precision")  # T=40, 32 and 16 may compile to other kernels
@pytest.mark.parametrize("mixer", [m if m in ("latte", "softmax") else
                                   pytest.param(m, marks=pytest.mark.slow) for m in sorted(MIXERS)])
def test_sorted_micro_batches_make_the_whole_batchs_gradient_and_update(mixer):
  """One update from sorted micro-batches is the whole batch's: plain SGD at rate 1 moves each
  parameter by exactly minus its gradient, so the two updates compare the gradients themselves
  (float32 summation order: rtol 1e-4 of the largest, at highest matmul precision)."""
  spec, model, params, arrays, _ = _case(mixer)
  by_length = np.argsort(example_lengths(arrays, spec), kind="stable")
  rows = np.stack([by_length[:4], by_length[-4:]], 1).ravel()  # short and long rows alternate
  batch = make_batch(arrays, rows, spec)  # fixed padding: [8,40]
  # Two long rows count 0: 4 and 2 real rows, so a mean of the micro-batches' means would differ.
  batch["weight"][[1, 3]] = 0.0
  micro = split_batch(batch, SORTED, spec.seq_len)
  assert [m["mask"].shape for m in micro] == [(4, 16), (4, 32)]  # each cut to its own longest
  np.testing.assert_array_equal(np.sort(np.concatenate([m["label"] for m in micro])),
                                np.sort(batch["label"]))
  step = _split_step(model)
  results = []
  for parts in ((batch,), micro):
    state = TrainState.create(apply_fn=model.apply, params=jax.tree.map(np.array, params)["params"],
                              tx=optax.sgd(1.0))
    results.append(jax.device_get(step(state, [jax.device_put(p) for p in parts])))
  (whole, whole_sums), (split, split_sums) = results
  assert split_sums["count"] == whole_sums["count"] == 6
  assert split_sums["correct_sum"] == whole_sums["correct_sum"]
  for key in ("loss_sum", "grad_norm"):
    np.testing.assert_allclose(split_sums[key], whole_sums[key], rtol=1e-5)
  start = jax.device_get(params["params"])
  grads = [jax.tree.map(lambda new, old: old - new, moved.params, start)
           for moved in (whole, split)]
  largest = max(np.abs(g).max() for g in jax.tree.leaves(grads[0]))
  assert largest > 1e-3  # the batch has a gradient to compare
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=0, atol=1e-4 * largest),
               grads[1], grads[0])


SMOKE_SORTED = ["data.padding=sorted", "data.pad_quantum=16", "train.grad_accum_steps=2"]


def _curve(run_dir):
  return [{k: v for k, v in r.items() if k != "train/steps_per_s"}
          for r in read_metrics(run_dir / "metrics.jsonl")]


def test_a_sorted_run_trains_with_the_fixed_padding_losses(tmp_path):
  """40 steps of smoke ListOps (lengths 1-32; quantum 16: two micro-batch lengths), dropout off:
  every logged loss and evaluation within float noise of fixed padding's, accuracies equal."""
  steps = ["train.num_steps=40", "train.log_every_steps=5", "eval.every_steps=20",
           "checkpoint.every_steps=40"]
  finals = {}
  for name, batching in (("fixed", []), ("sorted", SMOKE_SORTED)):
    finals[name] = run.run("listops", "latte", preset="smoke", data_dir=tmp_path / "data",
                           run_dir=tmp_path / name, progress=False, overrides=steps + batching)
  assert finals["sorted"]["batching"] == {"padding": "sorted", "quantum": 16, "bucketing": False,
                                          "micro_batches": 2}
  fixed, cut = _curve(tmp_path / "fixed"), _curve(tmp_path / "sorted")
  assert [sorted(r) for r in cut] == [sorted(r) for r in fixed] and len(fixed) == 10
  for got, want in zip(cut, fixed):
    for key, value in want.items():
      # Float summation order only: 40 Adam steps carry it to ~1e-6 relative here.
      assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-6), (key, got["step"])
  losses = [r["train/loss"] for r in fixed if "train/loss" in r]
  assert losses[-1] < losses[0]  # it trained
  for key in ("val_accuracy", "test_accuracy", "best_step"):
    assert finals["sorted"][key] == finals["fixed"][key]


def test_a_stopped_sorted_run_resumes_to_the_uninterrupted_run(tmp_path, step_clock, monkeypatch):
  """Dropout on: each micro-batch's masks come from (seed, step, micro-batch), so a run stopped
  (--stop-after, on a clock that counts steps) and resumed ends bit for bit as one that was not."""
  overrides = [*SMOKE_SORTED, "model.dropout=0.1", "train.num_steps=12",
               "train.log_every_steps=1", "eval.every_steps=4", "checkpoint.every_steps=4"]
  kwargs = dict(preset="smoke", data_dir=tmp_path / "data", progress=False, overrides=overrides)
  reference = run.run("listops", "latte", run_dir=tmp_path / "clean", **kwargs)
  step_clock()  # a step takes 1 s, an evaluation of a split 3 s, a save 2 s
  stopped = run.run("listops", "latte", run_dir=tmp_path / "run", stop_after_s=30, **kwargs)
  assert stopped["status"] == "interrupted" and 0 < stopped["step"] < 12, stopped
  monkeypatch.undo()
  resumed = run.run("listops", "latte", run_dir=tmp_path / "run", **kwargs)
  assert resumed["status"] == reference["status"] == "complete"
  for key in ("val_accuracy", "test_accuracy", "best_step", "best_test_accuracy"):
    assert resumed[key] == reference[key]
  assert _curve(tmp_path / "run") == _curve(tmp_path / "clean")


def test_the_variable_length_tasks_protocol_presets_sort_and_the_dry_run_says_so():
  from lra.report import dry_run
  from lra.runs.config_loading import resolve_config
  for task in ("listops", "text", "retrieval"):
    for preset in ("paper", "latte_code", "lra"):
      config = resolve_config(task, "latte", preset)
      assert (config.data.padding, config.train.grad_accum_steps) == ("sorted", 4), (task, preset)
  # BatchNorm's statistics span the batch: the published S5 rows keep theirs whole.
  published = resolve_config("listops", "s5", "published")
  assert published.model.norm == "batch" and published.data.padding == "fixed"
  assert published.train.grad_accum_steps == 1
  line = dry_run.batching_line(resolve_config("listops", "latte", "paper"))
  assert line.startswith("batching: each batch of 64 as the protocol draws it, its rows sorted by "
                         "length in 4 micro-batches of 16 rows and one update")
  assert dry_run.batching_line(resolve_config("listops", "latte", "smoke")) == (
      "batching: each batch of 16 padded to the task's length, in one piece")


@pytest.mark.parametrize("batch, k, devices, fix", [
    (32, 4, 16, "--config.train.grad_accum_steps=2"),  # Text, Retrieval on 16 devices
    (64, 4, 32, "--config.train.grad_accum_steps=2"),  # ListOps on 32
    (32, 4, 64, "run on 32 devices or fewer")])
def test_micro_batches_that_do_not_divide_over_the_devices_name_a_k_never_a_batch(
    batch, k, devices, fix, monkeypatch):
  """The batch size is the protocol's: the fix is another number of micro-batches (the same
  update), or fewer devices; an evaluation batch is named as what it is."""
  from lra import errors
  from lra.machine import distributed
  monkeypatch.setattr(distributed.jax, "device_count", lambda: devices)
  with pytest.raises(errors.BadValue) as refused:
    distributed.check_micro_batches(batch, k)
  message = str(refused.value)
  assert fix in message and "--config.train.batch_size" not in message
  distributed.check_micro_batches(devices * k, k)  # divides: no complaint
  with pytest.raises(errors.BadValue, match="eval.batch_size=20 must be a multiple of the"):
    distributed.check_divisible("eval.batch_size", 20, devices)
