"""What a task is: its name, how its data is made, and how its tokens read back as text.

`tasks` never imports `lra` or `models`: the runner reads a task's `TaskSpec` (from the prepared
cache's meta.json) and builds the model from it.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """Shapes the model needs, read from a prepared cache (never from a config).

  Attributes:
    vocab_size: number of token ids, pad included.
    seq_len: T, the padded length of one input sequence.
    num_classes: C.
    dual: True when an example is a pair of sequences (Retrieval).
    pad_id: the id that marks padding, or None when every position is real (pixels).
  """
  vocab_size: int
  seq_len: int
  num_classes: int
  dual: bool = False
  pad_id: int | None = 0

  @property
  def pixels(self) -> bool:
    """Whether the inputs are pixel values (every position real, no pad id) rather than a
    vocabulary's ids: what self-pretraining bins and scores the lit pixels of."""
    return self.pad_id is None

  @classmethod
  def from_meta(cls, meta: Mapping[str, Any]) -> TaskSpec:
    return cls(vocab_size=int(meta["vocab_size"]), seq_len=int(meta["seq_len"]),
               num_classes=int(meta["num_classes"]), dual=bool(meta.get("dual", False)),
               pad_id=meta.get("pad_id", 0))


@dataclasses.dataclass(frozen=True)
class Task:
  """One LRA task as the registry sees it.

  Attributes:
    name: registry key, equal to the module's file name.
    description: one line for `lra list`.
    data_hint: what the user runs to make the data (printed when the cache is missing).
    prepare: `prepare(source: Path, out_dir: Path, **options) -> dict` turns a raw source into a
      cache through lra.tasks.contract.build (kept when current, else replaced whole) and returns
      its meta.
    decode: `decode(tokens[T]) -> str`, the symbols a model sees, for `lra data inspect`.
    generate_small: `generate_small(raw_dir: Path, **config.data.generator)` writes a raw source
      (seed included in the params) for the presets that make their own data, where the suite
      can; it returns the `prepare` options that find what it wrote (or None: the defaults).
    generated_length: `generated_length(**config.data.generator) -> T`, the length of what
      `generate_small` makes, without making it (a dry run's input line), where it is fixed.
  """
  name: str
  description: str
  data_hint: str
  prepare: Callable[..., dict]
  decode: Callable[[np.ndarray], str]
  generate_small: Callable[..., dict | None] | None = None
  generated_length: Callable[..., int] | None = None

  def prepare_cache(self, source: Path, out_dir: Path, **options) -> dict:
    return self.prepare(Path(source), Path(out_dir), **options)
