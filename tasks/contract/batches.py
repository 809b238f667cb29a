"""Batches from a prepared cache: a seeded, resumable training stream and exact evaluation passes.

A batch is a dict of NumPy arrays: inputs[B,T] int32 (or inputs1/inputs2 for dual tasks),
mask[B,T] bool (or mask1/mask2), label[B] int32, weight[B] float32 (0 on filler rows of the last
eval batch, so every eval example counts exactly once).

T is the task's length, or with `Batching(padding="batch")` the batch's own longest example
rounded up to a multiple of `quantum` (exact: every mixer is padding invariant); with
`bucketing=True` training batches are drawn from examples of similar length. A training step may
take its batch as k micro-batches (`micro_batches`, one optimizer update from their summed
gradient); with `padding="sorted"` the batch's rows are sorted by length before the cut and each
micro-batch is padded to its own longest, so the short rows stop paying for the long ones.
Whatever the mode, every host of a multi-host run plans the same global batches from the same
data, so they agree on each batch's rows, its micro-batches and their T.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from lra import errors
from lra.tasks.contract.spec import TaskSpec

PADDINGS = ("fixed", "batch", "sorted")
MAX_SHAPES = 64  # distinct batch lengths (XLA compiles one program per length)


@dataclasses.dataclass(frozen=True)
class Batching:
  """How batches are shaped.

  Attributes:
    padding: "fixed" (every batch padded to the task's length T), "batch" (to the batch's
      longest example, rounded up to a multiple of `quantum`, at most T) or "sorted" (the
      batch's rows sorted by length, each micro-batch padded to its own longest, rounded so;
      evaluation batches drawn in length order).
    quantum: the rounding of padded lengths, which bounds the shapes to ceil(T / quantum).
    bucketing: training batches from length buckets of width `quantum` (needs padding="batch").
      Changes which examples share a batch (not which examples an epoch sees); eval is unchanged
      in content, its examples grouped by length.
    micro_batches: k, the micro-batches of B/k rows a training batch is cut into (one update
      from their summed gradient: train.grad_accum_steps). Sorted: micro-batch i holds the
      batch's rows i*B/k..(i+1)*B/k - 1 in length order; otherwise row r goes to micro-batch
      r % k (each device keeps its own rows), all padded to the batch's T.
  """
  padding: str = "fixed"
  quantum: int = 128
  bucketing: bool = False
  micro_batches: int = 1

  @classmethod
  def of(cls, config: Any) -> Batching:
    """A run's batching from its resolved config: data.padding, pad_quantum and bucketing, and
    train.grad_accum_steps as the micro-batches."""
    d = config.data
    return cls(padding=d.padding, quantum=d.pad_quantum, bucketing=d.bucketing,
               micro_batches=config.train.grad_accum_steps)

  def check(self, seq_len: int) -> None:
    """Raises ValueError with the fix for settings that cannot work for a task of length T."""
    if self.padding not in PADDINGS:
      raise errors.BadValue(f"data.padding must be one of {PADDINGS}, got {self.padding!r}")
    if self.bucketing and self.padding != "batch":
      raise errors.BadValue("data.bucketing=True needs per-batch padding: pass "
                            "--config.data.padding=batch as well")
    if self.quantum < 1:
      raise errors.BadValue(f"data.pad_quantum must be >= 1, got {self.quantum}")
    if self.micro_batches < 1:
      raise errors.BadValue(f"train.grad_accum_steps must be >= 1, got {self.micro_batches}")
    if self.padding != "fixed" and math.ceil(seq_len / self.quantum) > MAX_SHAPES:
      raise errors.BadValue(
          f"data.pad_quantum={self.quantum} gives up to {math.ceil(seq_len / self.quantum)} batch "
          f"lengths for T={seq_len}, each compiled separately; pass "
          f"--config.data.pad_quantum={math.ceil(seq_len / MAX_SHAPES)} or more")

  def padded_length(self, longest: int, seq_len: int) -> int:
    """T of a batch (or a sorted micro-batch) whose longest example has `longest` tokens."""
    if self.padding == "fixed":
      return seq_len
    return min(seq_len, max(1, math.ceil(longest / self.quantum)) * self.quantum)

  def programs(self, seq_len: int) -> int:
    """The most training programs a run compiles: one per micro-batch length it can meet (one
    at fixed padding, else up to ceil(T / quantum)); XLA compiles each at its first step."""
    return 1 if self.padding == "fixed" else math.ceil(seq_len / self.quantum)

  @property
  def programs_per_step(self) -> int:
    """The most new programs one training step can meet: sorted padding pads each of its k
    micro-batches to its own length; the other paddings pad a step's micro-batches alike."""
    return self.micro_batches if self.sorts else 1

  @property
  def sorts(self) -> bool:
    """Whether batches are ordered by length: sorted micro-batches, and evaluation with them."""
    return self.padding == "sorted"

  def cut(self, plan: np.ndarray, lengths: np.ndarray,
          seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Batches [S,B] of example indices -> (the same rows in micro-batch order [S,B], each
    micro-batch's padded T [S,k]): micro-batch i of step s is plan[s, i*B/k:(i+1)*B/k].

    Sorted: the rows by length (stable, so equal lengths keep the drawn order), each micro-batch
    padded to its own longest. Otherwise row r of the drawn batch goes to micro-batch r % k and
    every micro-batch takes the batch's T, as one batch would.
    """
    steps, rows = plan.shape
    k = self.micro_batches
    if rows % k:
      raise errors.BadValue(
          f"train.batch_size={rows} must be a multiple of train.grad_accum_steps={k}; pass e.g. "
          f"--config.train.grad_accum_steps={max(d for d in range(1, k + 1) if rows % d == 0)}")
    if self.sorts:
      plan = np.take_along_axis(plan, np.argsort(lengths[plan], axis=1, kind="stable"), axis=1)
      longest = lengths[plan].reshape(steps, k, rows // k).max(axis=2)
    else:
      plan = plan.reshape(steps, rows // k, k).transpose(0, 2, 1).reshape(steps, rows)
      longest = np.repeat(lengths[plan].max(axis=1, initial=0)[:, None], k, axis=1)
    padded = np.array([[self.padded_length(int(m), seq_len) for m in row] for row in longest],
                      np.int64).reshape(steps, k)
    return plan, padded


def example_lengths(arrays: Mapping[str, np.ndarray], spec: TaskSpec,
                    chunk: int = 8192) -> np.ndarray:
  """[N] int: each example's last real position + 1 (the longer document of a dual pair).

  Read in chunks, so a memory-mapped split is scanned once without being loaded whole. Pixel
  tasks (no pad id) have every position real.
  """
  keys = [k for k in arrays if k != "label"]
  n, seq_len = arrays[keys[0]].shape
  if spec.pad_id is None:
    return np.full(n, seq_len, np.int64)
  lengths = np.zeros(n, np.int64)
  for first in range(0, n, chunk):
    for key in keys:
      real = np.asarray(arrays[key][first:first + chunk]) != spec.pad_id
      # The last real position, found as the first real one from the end (0 for an empty row).
      last = np.where(real.any(1), seq_len - np.argmax(real[:, ::-1], axis=1), 0)
      lengths[first:first + chunk] = np.maximum(lengths[first:first + chunk], last)
  return lengths


def example_noise(indices: np.ndarray, seq_len: int, seed: int, step: int | None,
                  sequence: int = 0) -> np.ndarray:
  """[n, seq_len] float32 uniform in [0, 1): each row a function of (seed, step, the example's
  index, which of its sequences) alone, whatever batch, padding or device it lands in. Training
  steps draw anew at each step; evaluation (step None) draws the same noise every time, so every
  evaluation of a split hides the same tokens. A row is one stream: its first T values are the
  same whatever seq_len is drawn, so a batch cut to its longest real row draws only that many."""
  where = [0, step] if step is not None else [1]
  return np.stack([np.random.default_rng([seed, *where, sequence, int(i)]).random(
      seq_len, np.float32) for i in indices]) if len(indices) else np.zeros((0, seq_len),
                                                                              np.float32)


def make_batch(arrays: Mapping[str, np.ndarray], indices: np.ndarray, spec: TaskSpec,
               num_rows: int | None = None, length: int | None = None,
               noise: tuple[int, int | None] | None = None) -> dict[str, np.ndarray]:
  """Gathers rows into a batch; rows past len(indices) (up to num_rows) are weight-0 filler.

  Filler rows copy example 0, so they are valid inputs and a batch is the same whichever way its
  rows are split over hosts (a host's share of the last eval batch may be all filler). `length`
  keeps the first T positions (default: all); the caller picks it from the real rows of the
  global batch, so only pads are cut (and the tail of a weight-0 filler row). `noise=(seed,
  step)` adds `noise[B,T]` (`noise1`, `noise2`) from `example_noise`: what self-pretraining hides
  tokens by.
  """
  num_rows = len(indices) if num_rows is None else num_rows
  real = len(indices)
  indices = np.concatenate([np.asarray(indices, np.int64), np.zeros(num_rows - real, np.int64)])
  # Sorted reads are sequential on a memmap; the order is restored afterwards.
  order = np.argsort(indices, kind="stable")
  inverse = np.empty_like(order)
  inverse[order] = np.arange(len(order))
  batch: dict[str, np.ndarray] = {}
  for key, array in arrays.items():
    rows = np.asarray(array[indices[order]])[inverse]
    if key != "label":
      rows = rows[:, :length]
    batch[key] = rows.astype(np.int32)
    if key != "label":
      suffix = key[len("inputs"):]
      if spec.pad_id is None:
        batch["mask" + suffix] = np.ones(rows.shape, dtype=bool)
      else:
        batch["mask" + suffix] = rows != spec.pad_id
      if noise is not None:  # a row's first T draws are the same whatever T (one stream)
        batch["noise" + suffix] = example_noise(indices, rows.shape[1], *noise,
                                                sequence=int(suffix or 0))
  weight = np.ones(num_rows, dtype=np.float32)
  weight[real:] = 0.0
  batch["weight"] = weight
  return batch


def steps_per_epoch(num_examples: int, batch_size: int) -> int:
  if num_examples < batch_size:
    raise errors.BadValue(f"Batch size {batch_size} exceeds the {num_examples} training examples.")
  return num_examples // batch_size


def epoch_permutation(num_examples: int, seed: int, epoch: int) -> np.ndarray:
  """The training order of one epoch: a function of (seed, epoch) only, so resume is exact."""
  return np.random.default_rng([seed, epoch]).permutation(num_examples)


def bucketed_batches(perm: np.ndarray, lengths: np.ndarray, batch_size: int, quantum: int,
                     seed: int, epoch: int) -> np.ndarray:
  """[S,B] example indices of one epoch's batches, each from examples of similar length.

  As tf.data's bucket_by_sequence_length, in the permutation's order: an example goes to bucket
  ceil(length / quantum) and every B examples of a bucket make a batch. The epoch keeps the
  examples plain batching keeps (the permutation less its last N mod B), and as many batches:
  the buckets' remainders, in bucket order, make the last few batches (neighbouring lengths).
  The batch order is then shuffled, seeded by (seed, epoch).
  """
  perm = perm[:len(perm) // batch_size * batch_size]
  bucket = np.maximum(1, -(-lengths[perm] // quantum))
  grouped = np.argsort(bucket, kind="stable")  # stable: permutation order within a bucket
  by_bucket, bucket = perm[grouped], bucket[grouped]
  starts = np.searchsorted(bucket, np.unique(bucket))
  ends = np.append(starts[1:], len(perm))
  full, rest = [], []
  for a, b in zip(starts, ends):
    cut = a + (b - a) // batch_size * batch_size
    full.append(by_bucket[a:cut])
    rest.append(by_bucket[cut:b])
  plan = np.concatenate(full + rest).reshape(-1, batch_size)
  return plan[np.random.default_rng([seed, epoch, 1]).permutation(len(plan))]


def epoch_plan(lengths: np.ndarray, spec: TaskSpec, batch_size: int, seed: int, epoch: int,
               batching: Batching = Batching()) -> tuple[np.ndarray, np.ndarray]:
  """One training epoch: example indices [S,B] in micro-batch order and each micro-batch's
  padded length T [S,k] (k = batching.micro_batches; see `Batching.cut`).

  A function of (lengths, seed, epoch, batching) only: resume at any step is exact, and every
  host of a multi-host run computes the same plan. The batches (which examples, in which step)
  do not depend on the padding or on k; bucketing changes them.
  """
  n = len(lengths)
  per_epoch = steps_per_epoch(n, batch_size)
  perm = epoch_permutation(n, seed, epoch)
  if batching.bucketing:
    plan = bucketed_batches(perm, lengths, batch_size, batching.quantum, seed, epoch)
  else:
    plan = perm[:per_epoch * batch_size].reshape(per_epoch, batch_size)
  return batching.cut(plan, lengths, spec.seq_len)


def _lengths(arrays: Mapping[str, np.ndarray], spec: TaskSpec, batching: Batching,
             lengths: np.ndarray | None = None) -> np.ndarray:
  """Each example's length where the padding reads it, else T for all (no scan)."""
  if lengths is not None:
    return lengths
  if batching.padding == "fixed":
    return np.full(len(arrays["label"]), spec.seq_len, np.int64)
  return example_lengths(arrays, spec)


def step_batches(arrays: Mapping[str, np.ndarray], spec: TaskSpec, batch_size: int, seed: int,
                 start_step: int = 0, rows: tuple[int, int] | None = None,
                 batching: Batching = Batching(), lengths: np.ndarray | None = None,
                 noise_seed: int | None = None) -> Iterator[tuple[dict[str, np.ndarray], ...]]:
  """Infinite training stream of each step's k micro-batches (a tuple; one batch when k = 1);
  step s is the same whether the run started at 0 or resumed at s.

  Each epoch is a seeded permutation with the remainder dropped (grouped by length with
  bucketing, see `epoch_plan`). `rows=(start, stop)` yields only those rows of every global
  micro-batch of batch_size / k rows (one host's share in a multi-host run), so every device
  holds rows of every micro-batch. `lengths` (from `example_lengths`) saves a scan when the
  caller has them. `noise_seed`: each batch carries its examples' noise of this step
  (`example_noise`).
  """
  batching.check(spec.seq_len)
  lengths = _lengths(arrays, spec, batching, lengths)
  per_epoch = steps_per_epoch(len(arrays["label"]), batch_size)
  k = batching.micro_batches
  size = batch_size // k
  start, stop = rows or (0, size)
  step, plan_epoch, plan, padded = start_step, None, None, None
  while True:
    epoch, index = divmod(step, per_epoch)
    if epoch != plan_epoch:  # once per epoch: a permutation of 160k rows is not free
      plan_epoch = epoch
      plan, padded = epoch_plan(lengths, spec, batch_size, seed, epoch, batching)
    noise = None if noise_seed is None else (noise_seed, step)
    yield tuple(make_batch(arrays, plan[index][i * size:(i + 1) * size][start:stop], spec,
                           length=int(padded[index, i]), noise=noise) for i in range(k))
    step += 1


def train_batches(arrays: Mapping[str, np.ndarray], spec: TaskSpec, batch_size: int, seed: int,
                  start_step: int = 0, rows: tuple[int, int] | None = None,
                  batching: Batching = Batching(),
                  lengths: np.ndarray | None = None) -> Iterator[dict[str, np.ndarray]]:
  """`step_batches` with each step's batch whole (micro_batches=1): the same examples in the same
  steps; `rows` are rows of the whole batch. Sorted padding orders each batch's rows by length."""
  whole = dataclasses.replace(batching, micro_batches=1)
  for (batch,) in step_batches(arrays, spec, batch_size, seed, start_step, rows, whole, lengths):
    yield batch


def split_batch(batch: Mapping[str, np.ndarray], batching: Batching,
                seq_len: int) -> tuple[dict[str, np.ndarray], ...]:
  """A whole batch already in memory -> its k micro-batches, as `step_batches` cuts a planned
  one (lengths read from its masks). For tools and tests that hold batches, not a cache."""
  masks = [v for key, v in batch.items() if key.startswith("mask")]
  real = np.zeros(masks[0].shape, bool)
  for mask in masks:
    real |= np.asarray(mask, bool)
  width = real.shape[1]
  lengths = np.where(real.any(1), width - np.argmax(real[:, ::-1], axis=1), 0)
  plan, padded = batching.cut(np.arange(len(lengths))[None], lengths, seq_len)
  size = len(lengths) // batching.micro_batches
  micro = []
  for i, t in enumerate(padded[0]):
    rows = plan[0, i * size:(i + 1) * size]
    micro.append({key: (np.asarray(v)[rows] if np.ndim(v) == 1 else np.asarray(v)[rows, :t])
                  for key, v in batch.items()})
  return tuple(micro)


def eval_plan(lengths: np.ndarray, spec: TaskSpec, batch_size: int,
              batching: Batching = Batching()) -> list[tuple[np.ndarray, int]]:
  """(example indices, padded T) of every eval batch: each example once, the last batch short.

  In data order; with bucketing or sorted padding, in order of length, so that batches need
  little padding (each example is scored on its own: the order changes no score).
  """
  order = (np.argsort(lengths, kind="stable") if batching.bucketing or batching.sorts
           else np.arange(len(lengths)))
  chunks = [order[first:first + batch_size] for first in range(0, len(order), batch_size)]
  return [(c, batching.padded_length(int(lengths[c].max()), spec.seq_len)) for c in chunks]


def eval_batches(arrays: Mapping[str, np.ndarray], spec: TaskSpec, batch_size: int,
                 rows: tuple[int, int] | None = None, batching: Batching = Batching(),
                 noise_seed: int | None = None) -> Iterator[dict[str, np.ndarray]]:
  """Every example exactly once; the last batch is padded with weight-0 rows.

  `rows=(start, stop)` yields only those rows of every (padded) global batch; `noise_seed`: each
  batch carries its examples' evaluation noise (`example_noise`, the same at every pass).
  """
  for _, batch in indexed_eval_batches(arrays, spec, batch_size, rows, batching, noise_seed):
    yield batch


def indexed_eval_batches(arrays: Mapping[str, np.ndarray], spec: TaskSpec, batch_size: int,
                         rows: tuple[int, int] | None = None, batching: Batching = Batching(),
                         noise_seed: int | None = None
                         ) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
  """eval_batches with each global batch's example indices: its first len(indices) rows are
  those examples, in that order; the rest are weight-0 filler."""
  batching.check(spec.seq_len)
  lengths = _lengths(arrays, spec, batching)
  start, stop = rows or (0, batch_size)
  noise = None if noise_seed is None else (noise_seed, None)
  for indices, length in eval_plan(lengths, spec, batch_size, batching):
    yield indices, make_batch(arrays, indices[start:stop], spec, num_rows=stop - start,
                              length=length, noise=noise)
