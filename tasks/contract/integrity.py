"""Is a cache array the one meta.json describes? A cheap check for every load, a full one on demand.

meta.json's `arrays` entry for each `<split>.<key>.npy` records its shape, dtype (NumPy's `str`,
e.g. "<u2"), size in bytes, the sha256 of the whole file, and a `sample` digest: sha256 over 17
blocks of 4 KiB spread evenly from the first byte to the last (the whole file when it is smaller).
The cheap check (size, .npy header, sample) reads about 70 KiB per array whatever its size, so it
catches a truncated, deleted, replaced or re-headed file on every load; only the full check (a
sha256 of every byte: seconds at Path-X's 3.3 GB) also catches a damaged block between samples.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from lra import errors
from lra.base import manifest

_BLOCK = 1 << 12
_SAMPLES = 16  # gaps between sampled blocks; the blocks are _SAMPLES + 1, first and last included


def read_header(path: Path) -> tuple[tuple[int, ...], np.dtype, int]:
  """(shape, dtype, size the file must have) from a .npy header; ValueError if it is no header."""
  with open(path, "rb") as f:
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
      shape, _, dtype = np.lib.format.read_array_header_1_0(f)
    else:
      shape, _, dtype = np.lib.format.read_array_header_2_0(f)
    dtype = np.dtype(dtype)
    return tuple(shape), dtype, f.tell() + int(np.prod(shape)) * dtype.itemsize


def sample_digest(path: Path, size: int) -> str:
  """"sha256:<hex>" of the sampled blocks of a file of `size` bytes (see the module docstring)."""
  digest = hashlib.sha256(str(size).encode())
  with open(path, "rb") as f:
    if size <= _BLOCK * (_SAMPLES + 1):
      digest.update(f.read())
    else:
      step = (size - _BLOCK) / _SAMPLES
      for i in range(_SAMPLES + 1):
        f.seek(round(i * step))
        digest.update(f.read(_BLOCK))
  return "sha256:" + digest.hexdigest()


def describe(path: Path) -> dict:
  """meta.json's entry for one written array; ValueError when the file is shorter than its header
  says (a write that failed without an error)."""
  shape, dtype, expected = read_header(path)
  size = Path(path).stat().st_size
  if size != expected:
    raise errors.BadValue(f"{path} has {size:,} bytes; its header implies {expected:,}.")
  return {"shape": list(shape), "dtype": dtype.str, **manifest.entry(path, prefix=manifest.PREFIX),
          "sample": sample_digest(path, size)}


def problem(path: Path, entry: dict, *, full: bool = False) -> str | None:
  """What is wrong with the file at `path` given its meta.json entry, or None when it matches.

  Args:
    path: the array file.
    entry: its `arrays` entry in meta.json.
    full: compare the sha256 of every byte, not only the sampled blocks.
  """
  try:
    size = Path(path).stat().st_size
  except FileNotFoundError:
    return "missing"
  if size != entry["bytes"]:
    return f"{size:,} bytes where meta.json records {entry['bytes']:,} (cut short or overwritten)"
  try:
    shape, dtype, expected = read_header(path)
  except (ValueError, OSError, EOFError) as e:
    return f"not a readable .npy file ({e})"
  if list(shape) != entry["shape"] or dtype != np.dtype(entry["dtype"]) or expected != size:
    return (f"holds {dtype.str} {list(shape)} where meta.json records {entry['dtype']} "
            f"{entry['shape']}")
  if full:
    if manifest.PREFIX + manifest.sha256_file(path) != entry["sha256"]:
      return "its bytes differ from the sha256 meta.json records"
  elif sample_digest(path, size) != entry["sample"]:
    return "its bytes differ from the sampled digest meta.json records"
  return None
