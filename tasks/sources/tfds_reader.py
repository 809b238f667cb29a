"""Reads the train and test splits of a TFDS data dir through the TFDS API (an optional extra).

TFDS stores records that only TensorFlow can read, so `tensorflow-datasets` is imported here and
nowhere else; a user without it is told how to install it or which plain format to bring instead.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from lra import errors


def read_splits(name: str, data_dir: Path, field: str,
                plain_formats: str) -> dict[str, tuple[list[Any], list[int]]]:
  """Returns {split: (values of `field`, labels)} for train and test, in TFDS's file order."""
  try:
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise errors.MissingPackage(
        f"Reading the TFDS data dir {data_dir} needs tensorflow-datasets (and TensorFlow): "
        f"pip install -e .[tfds]\nOr point --source at {plain_formats}, which need nothing "
        f"extra.") from None
  builder = tfds.builder(name, data_dir=str(data_dir))
  out = {}
  for split in ("train", "test"):
    values, labels = [], []
    for example in tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)):
      values.append(example[field])
      labels.append(int(example["label"]))
    out[split] = (values, labels)
  return out
