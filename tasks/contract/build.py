"""Preparing a cache: what it is made from (a Recipe), whether the cache on disk is current, and
writing a new one whole.

Every task's prepare locates and fingerprints its source, declares a `Recipe`, and hands `build`
a function that writes the arrays. `build` alone decides "current or rebuild", before the source
is read: the cache is current when meta.json is readable and of this format, records the same
task, source format and fingerprints, options and tokenizer, and every array matches its full
sha256. Otherwise the arrays are written into a new folder beside the cache, described in its
meta.json, and swapped in whole (tasks.contract.atomic).
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from lra.tasks.contract import atomic, integrity
from lra.tasks.contract.cache import (FORMAT_VERSION, META_FILE, CacheWriteError, array_files,
                                      array_path, input_keys, read_meta)
from lra.tasks.contract.row_writer import RowWriter


def _canonical(value: Any) -> Any:
  return json.loads(json.dumps(value, sort_keys=True))  # what meta.json will read back


@dataclasses.dataclass(frozen=True)
class Recipe:
  """What a cache is made from; equal recipes make equal arrays.

  Attributes:
    task: the registry name.
    source_path: where the source was found (recorded, not compared: a moved copy is the same).
    source_format: which of the task's source kinds it is, e.g. "aclImdb_v1.tar.gz".
    checksums: {file or pattern: "sha256:..." | "size+mtime:..."} (tasks.contract.fingerprint).
    options: the resolved prepare options that change the arrays.
    tokenizer: how the source became token ids; a change here rebuilds every cache it made.
  """
  task: str
  source_path: Path
  source_format: str
  checksums: Mapping[str, str]
  options: Mapping[str, Any]
  tokenizer: str

  def source(self) -> dict:
    return {"path": str(Path(self.source_path).resolve()), "format": self.source_format,
            "checksums": dict(self.checksums)}

  def differences(self, meta: Mapping[str, Any]) -> list[str]:
    """How an existing cache's meta.json differs from this recipe (empty when it does not)."""
    found = []
    if meta["task"] != self.task:
      found.append(f"it was made for task {meta['task']!r}")
    old = meta["source"]
    if old.get("format") != self.source_format:
      found.append(f"its source was {old.get('format')!r}, now {self.source_format!r}")
    elif old.get("checksums") != _canonical(dict(self.checksums)):
      before, now = old.get("checksums") or {}, dict(self.checksums)
      changed = sorted(k for k in {*before, *now} if before.get(k) != now.get(k))
      found.append(f"source files changed ({', '.join(changed[:3])})")
    if meta["options"] != _canonical(dict(self.options)):
      found.append(f"options were {meta['options']}, now {dict(self.options)}")
    if meta["tokenizer"] != self.tokenizer:
      found.append("the tokenizer changed")
    return found


class CacheWriter:
  """Writes one cache's arrays into the folder `build` swaps in once the task's writer returns."""

  def __init__(self, folder: Path):
    self.folder = Path(folder)

  def write(self, split: str, key: str, array: np.ndarray) -> None:
    """Writes a whole array[N, ...] held in memory."""
    path = array_path(self.folder, split, key)
    try:
      np.save(path, np.asarray(array))
    except OSError as e:
      raise CacheWriteError(path, e) from None

  def rows(self, split: str, key: str, capacity: int, width: int, dtype: Any) -> RowWriter:
    """A writer that streams rows[n, width] to disk, for splits too large for memory."""
    return RowWriter(array_path(self.folder, split, key), capacity, width, dtype)


def stale_reason(out_dir: Path, recipe: Recipe) -> str | None:
  """None when the cache at out_dir is current for `recipe` (arrays fully verified), else why
  not."""
  out_dir = Path(out_dir)
  try:
    meta = read_meta(out_dir)
  except ValueError as e:
    return f"{META_FILE}: {e}"
  if meta is None:
    return "no cache there"
  differences = recipe.differences(meta)
  if differences:
    return "; ".join(differences)
  for name, entry in meta["arrays"].items():
    try:
      problem = integrity.problem(out_dir / name, entry, full=True)
    except (KeyError, TypeError):
      problem = f"its {META_FILE} entry is malformed"
    if problem:
      return f"{name}: {problem}"
  return None


def _describe_arrays(folder: Path, meta: dict) -> dict[str, dict]:
  """meta.json's `arrays`, after checking the task wrote exactly the arrays its meta promises."""
  expected = array_files(meta)
  written = sorted(p.name for p in folder.glob("*.npy"))
  if written != sorted(expected):
    raise ValueError(f"{meta['task']}: the prepare wrote {written}, expected {expected}.")
  arrays = {}
  for split in meta["splits"]:
    for key in (*input_keys(bool(meta.get("dual"))), "label"):
      path = array_path(folder, split, key)
      entry = integrity.describe(path)
      width = [meta["seq_len"]] if key != "label" else []
      if entry["shape"] != [meta["splits"][split], *width]:
        raise ValueError(f"{meta['task']}: {path.name} has shape {entry['shape']}, expected "
                         f"{[meta['splits'][split], *width]} from the split size and seq_len.")
      arrays[path.name] = entry
  return arrays


def build(out_dir: Path, recipe: Recipe, write: Callable[[CacheWriter], dict],
          log: Callable[[str], None] = lambda msg: print(msg, flush=True)) -> dict:
  """The cache at out_dir for `recipe`: kept when current, else made by `write` and swapped in.

  Args:
    out_dir: the cache folder.
    recipe: what the cache is made from.
    write: writes every `<split>.<key>.npy` through the CacheWriter it is given and returns the
      rest of meta.json: vocab_size, seq_len, num_classes, dual, pad_id, splits {name: rows},
      and any task facts (validation, num_truncated, ...).
    log: where a line about an up-to-date or rebuilt cache goes.
  Returns:
    The cache's meta.
  Raises:
    CacheWriteError: the disk refused the new cache (full, read-only); the old one is untouched.
    Whatever `write` raises about the source (the old cache is untouched then too).
  """
  out_dir = Path(out_dir).expanduser()
  atomic.recover(out_dir, log)  # a swap a dead process left half done may hold a current cache
  reason = stale_reason(out_dir, recipe)
  if reason is None:
    log(f"{recipe.task}: {out_dir} is up to date with {recipe.source_path} (every array "
        f"verified); nothing to do.")
    return read_meta(out_dir)
  if reason != "no cache there":
    log(f"{recipe.task}: rebuilding {out_dir}: {reason}.")
  stage = "setup"
  try:
    with atomic.replacing(out_dir, log) as folder:
      meta = {"format_version": FORMAT_VERSION, "task": recipe.task, "source": recipe.source(),
              "options": _canonical(dict(recipe.options)), "tokenizer": recipe.tokenizer}
      stage = "task"
      meta.update(write(CacheWriter(folder)))
      stage = "describe"
      meta["arrays"] = _describe_arrays(folder, meta)
      (folder / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
  except OSError as e:
    # The task's own OSErrors are about its source (its cache writes raise CacheWriteError);
    # the rest are ours: the folder beside the cache, meta.json, the swap.
    if stage == "task" or isinstance(e, CacheWriteError):
      raise
    raise CacheWriteError(e.filename or out_dir, e) from None
  return _canonical(meta)  # as read back from meta.json next time
