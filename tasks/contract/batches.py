"""Batches from a prepared cache: a seeded, resumable training stream and exact evaluation passes.

A batch is a dict of NumPy arrays: inputs[B,T] int32 (or inputs1/inputs2 for dual tasks),
mask[B,T] bool (or mask1/mask2), label[B] int32, weight[B] float32 (0 on filler rows of the last
eval batch, so every eval example counts exactly once).
"""
from __future__ import annotations

from typing import Iterator, Mapping

import numpy as np

from lra.tasks.contract.spec import TaskSpec


def make_batch(arrays: Mapping[str, np.ndarray], indices: np.ndarray, spec: TaskSpec,
               num_rows: int | None = None) -> dict[str, np.ndarray]:
  """Gathers rows into a batch; rows past len(indices) (up to num_rows) are weight-0 filler.

  Filler rows copy example 0, so they are valid inputs and a batch is the same whichever way its
  rows are split over hosts (a host's share of the last eval batch may be all filler).
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
    batch[key] = rows.astype(np.int32)
    if key != "label":
      mask_key = "mask" + key[len("inputs"):]
      if spec.pad_id is None:
        batch[mask_key] = np.ones(rows.shape, dtype=bool)
      else:
        batch[mask_key] = rows != spec.pad_id
  weight = np.ones(num_rows, dtype=np.float32)
  weight[real:] = 0.0
  batch["weight"] = weight
  return batch


def steps_per_epoch(num_examples: int, batch_size: int) -> int:
  if num_examples < batch_size:
    raise ValueError(f"Batch size {batch_size} exceeds the {num_examples} training examples.")
  return num_examples // batch_size


def epoch_permutation(num_examples: int, seed: int, epoch: int) -> np.ndarray:
  """The training order of one epoch: a function of (seed, epoch) only, so resume is exact."""
  return np.random.default_rng([seed, epoch]).permutation(num_examples)


def train_batches(arrays: Mapping[str, np.ndarray], spec: TaskSpec, batch_size: int, seed: int,
                  start_step: int = 0,
                  rows: tuple[int, int] | None = None) -> Iterator[dict[str, np.ndarray]]:
  """Infinite training stream; batch k is the same whether the run started at 0 or resumed at k.

  Each epoch is a seeded permutation with the remainder dropped. `rows=(start, stop)` yields only
  those rows of every global batch (one host's share in a multi-host run).
  """
  n = len(arrays["label"])
  per_epoch = steps_per_epoch(n, batch_size)
  start, stop = rows or (0, batch_size)
  step, perm_epoch, perm = start_step, None, None
  while True:
    epoch, index = divmod(step, per_epoch)
    if epoch != perm_epoch:  # once per epoch: a permutation of 160k rows is not free
      perm_epoch, perm = epoch, epoch_permutation(n, seed, epoch)
    yield make_batch(arrays, perm[index * batch_size:(index + 1) * batch_size][start:stop], spec)
    step += 1


def eval_batches(arrays: Mapping[str, np.ndarray], spec: TaskSpec, batch_size: int,
                 rows: tuple[int, int] | None = None) -> Iterator[dict[str, np.ndarray]]:
  """Every example exactly once, in order; the last batch is padded with weight-0 rows.

  `rows=(start, stop)` yields only those rows of every (padded) global batch.
  """
  n = len(arrays["label"])
  start, stop = rows or (0, batch_size)
  for first in range(0, n, batch_size):
    indices = np.arange(first, min(first + batch_size, n))
    yield make_batch(arrays, indices[start:stop], spec, num_rows=stop - start)
