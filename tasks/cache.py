"""The prepared-data cache: NumPy arrays per split plus meta.json, read memory-mapped.

Layout of one cache folder (`<data_dir>/<cache name>/`):
  meta.json                     written last: its presence means the cache is complete
  <split>.<key>.npy             key in {inputs, label} or {inputs1, inputs2, label} for dual tasks
Batches are dicts of NumPy arrays: inputs[B,T] int32 (or inputs1/inputs2), mask[B,T] bool
(or mask1/mask2), label[B] int32, weight[B] float32 (0 on filler rows of the last eval batch).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from tasks.spec import TaskSpec

META_FILE = "meta.json"
FORMAT_VERSION = 1
SPLITS = ("train", "val", "test")


class DataMissingError(FileNotFoundError):
  """The cache is absent or incomplete; the message says which command makes it."""


def array_path(cache_dir: Path, split: str, key: str) -> Path:
  return Path(cache_dir) / f"{split}.{key}.npy"


def _tmp(path: Path) -> Path:
  return path.with_name(path.name + ".tmp")


def write_array(cache_dir: Path, split: str, key: str, array: np.ndarray) -> None:
  """Writes one array to a temporary name; `finalize` moves it into place."""
  Path(cache_dir).mkdir(parents=True, exist_ok=True)
  with open(_tmp(array_path(cache_dir, split, key)), "wb") as f:
    np.save(f, array)


def create_array(cache_dir: Path, split: str, key: str, shape: tuple[int, ...],
                 dtype: Any) -> np.memmap:
  """A writable memory-mapped array, for sets too large to hold in memory (Path-X)."""
  Path(cache_dir).mkdir(parents=True, exist_ok=True)
  return np.lib.format.open_memmap(_tmp(array_path(cache_dir, split, key)), mode="w+",
                                   dtype=dtype, shape=shape)


def finalize(cache_dir: Path, meta: dict) -> dict:
  """Moves every pending array into place, then writes meta.json atomically (last)."""
  cache_dir = Path(cache_dir)
  meta_path = cache_dir / META_FILE
  if meta_path.exists():
    meta_path.unlink()  # an interrupted re-prepare must not leave old meta beside new arrays
  for tmp in cache_dir.glob("*.npy.tmp"):
    os.replace(tmp, tmp.with_name(tmp.name[:-len(".tmp")]))
  meta = {"format_version": FORMAT_VERSION, **meta}
  tmp_meta = _tmp(meta_path)
  tmp_meta.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
  os.replace(tmp_meta, meta_path)
  return meta


def read_meta(cache_dir: Path) -> dict | None:
  path = Path(cache_dir) / META_FILE
  return json.loads(path.read_text()) if path.exists() else None


def file_checksum(path: Path, chunk: int = 1 << 20) -> str:
  """sha256 of a file, streamed."""
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    while block := f.read(chunk):
      digest.update(block)
  return digest.hexdigest()


class PreparedData:
  """A complete cache folder: its meta, spec and memory-mapped split arrays."""

  def __init__(self, cache_dir: Path, hint: str = ""):
    self.cache_dir = Path(cache_dir)
    meta = read_meta(self.cache_dir)
    if meta is None:
      raise DataMissingError(
          f"No prepared data at {self.cache_dir} (expected {META_FILE} and "
          f"<split>.<key>.npy files there).\n{hint}".rstrip())
    self.meta = meta
    self.spec = TaskSpec.from_meta(meta)

  @property
  def input_keys(self) -> tuple[str, ...]:
    return ("inputs1", "inputs2") if self.spec.dual else ("inputs",)

  def split(self, name: str) -> dict[str, np.ndarray]:
    if name not in self.meta.get("splits", {}):
      raise KeyError(f"Split '{name}' not in {self.cache_dir} "
                     f"(has: {', '.join(self.meta.get('splits', {}))})")
    return {key: np.load(array_path(self.cache_dir, name, key), mmap_mode="r")
            for key in (*self.input_keys, "label")}

  def num_examples(self, split: str) -> int:
    return int(self.meta["splits"][split])


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
