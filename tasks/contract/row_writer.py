"""Streams rows into a cache array, for splits too large to hold in memory (Retrieval, Path-X).

Writes go through the file, not a memory map: pages written through a map count as the process's
resident memory until it is unmapped, which for Path-X would be the whole 3 GB set.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from lra.tasks.contract.cache import CacheWriteError

_COPY_BYTES = 1 << 24


class RowWriter:
  """Appends rows[n, T] in order to one .npy file (made by tasks.contract.build.CacheWriter).

  The array is created with room for `capacity` rows; `close` shrinks it when fewer were written
  (Pathfinder skips unreadable images, so the count is known only at the end).
  """

  def __init__(self, path: Path, capacity: int, width: int, dtype: np.dtype):
    self._path = Path(path)
    self.width = width
    self.dtype = np.dtype(dtype)
    self.capacity = capacity
    self.count = 0
    try:
      offset = self._create(self._path, capacity)
      self._file = open(self._path, "r+b")
    except OSError as e:
      raise CacheWriteError(self._path, e) from None
    self._file.seek(offset)

  def _create(self, path: Path, rows: int) -> int:
    """Writes the .npy header for rows[rows, width]; returns where the data starts."""
    array = np.lib.format.open_memmap(path, mode="w+", dtype=self.dtype, shape=(rows, self.width))
    offset = int(array.offset)
    del array  # unmapped: from here on the file is written through its descriptor
    return offset

  def append(self, rows: np.ndarray) -> None:
    """Writes rows[n, T]."""
    rows = np.ascontiguousarray(rows, dtype=self.dtype)
    if rows.ndim != 2 or rows.shape[1] != self.width:
      raise ValueError(f"Expected rows of shape [n, {self.width}], got {rows.shape}.")
    if self.count + len(rows) > self.capacity:
      raise ValueError(f"{self._path}: more than the {self.capacity} rows announced.")
    if rows.size:
      try:
        self._file.write(memoryview(rows).cast("B"))
      except OSError as e:
        raise CacheWriteError(self._path, e) from None
    self.count += len(rows)

  def close(self) -> int:
    """Flushes, shrinks the array to the rows written, and returns their count."""
    try:
      return self._close()
    except OSError as e:
      raise CacheWriteError(self._path, e) from None

  def _close(self) -> int:
    old_offset = self._file.tell() - self.count * self.width * self.dtype.itemsize
    self._file.close()
    if self.count < self.capacity:
      oversize = self._path.with_name(self._path.name + ".oversize")
      os.replace(self._path, oversize)
      offset = self._create(self._path, self.count)
      with open(oversize, "rb") as src, open(self._path, "r+b") as dst:
        src.seek(old_offset)
        dst.seek(offset)
        remaining = self.count * self.width * self.dtype.itemsize
        while remaining:
          block = src.read(min(_COPY_BYTES, remaining))
          dst.write(block)
          remaining -= len(block)
      oversize.unlink()
    return self.count
