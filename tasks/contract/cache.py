"""The prepared-data cache: NumPy arrays per split plus meta.json, read memory-mapped.

Layout of one cache folder (`<data_dir>/<cache name>/`):
  meta.json                     written last: its presence means the cache is complete
  <split>.<key>.npy             key in {inputs, label} or {inputs1, inputs2, label} for dual tasks
Batches drawn from it are made by tasks.contract.batches.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from lra.tasks.contract.spec import TaskSpec

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
