"""Pathfinder metadata files, `metadata/<batch>.npy`: one row of 11 fields per image.

Row: `imgs/<batch> sample_<k>.png <k> <label> <continuity> <contour_length> <distractor_length>
<paddle_length> <paddle_thickness> <margin> <n_contrasts>`. The LRA release stores the rows as
text lines despite the suffix; the snakes generator itself (`snakes.save_metadata`) wrote them
with `np.save` as an [N, 11] string array (bytes under Python 2, str under Python 3). Both read.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from lra import errors

NPY_MAGIC = b"\x93NUMPY"
EXPECTED = "'imgs/<batch> sample_<k>.png <k> <label 0|1> ...'"


def format_row(batch: int, k: int, label: int, fields: tuple) -> str:
  """One text line of the release format."""
  return " ".join(str(x) for x in (f"imgs/{batch}", f"sample_{k}.png", k, label, *fields))


def _check(path: Path, number: int, fields: list[str], found) -> list[str]:
  if len(fields) < 4 or fields[3] not in ("0", "1") or not fields[1].endswith(".png"):
    raise errors.BadValue(f"{path}:{number}: expected {EXPECTED}, found {found!r}.")
  return fields


def _binary_rows(path: Path, data: bytes) -> list[list[str]]:
  try:
    array = np.load(io.BytesIO(data), allow_pickle=False)
  except ValueError as error:  # object arrays would need pickle, which we never load
    found = ("a file cut short" if str(error).startswith("EOF") else
             "an array that cannot be read without pickle")
    raise errors.BadValue(f"{path}: expected np.save of an [N, 11] string array, found {found} "
                          f"({error}).") from None
  if array.ndim != 2 or array.dtype.kind not in "US":
    raise errors.BadValue(f"{path}: expected np.save of an [N, 11] string array, found "
                          f"{array.dtype} {list(array.shape)}.")
  rows = array.astype(str).tolist()
  return [_check(path, number, [f.strip() for f in row], " ".join(row))
          for number, row in enumerate(rows, start=1)]


def read_metadata(path: Path) -> list[list[str]]:
  """The rows of one metadata file, text lines or `np.save` binary.

  Raises:
    ValueError: naming the file and line (or row) that is not
      `imgs/<batch> sample_<k>.png <k> <label 0|1> ...`.
  """
  path = Path(path)
  data = path.read_bytes()
  if data.startswith(NPY_MAGIC):
    return _binary_rows(path, data)
  rows = []
  for number, raw in enumerate(data.splitlines(), start=1):
    fields = raw.decode("utf-8", errors="replace").split()
    if fields:
      rows.append(_check(path, number, fields, raw[:80]))
  return rows
