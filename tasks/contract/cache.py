"""The prepared-data cache: NumPy arrays per split plus meta.json, read memory-mapped and checked.

Layout of one cache folder (`<data_dir>/<cache name>/`), always written whole by
tasks.contract.build (so it is complete or absent, never partial):
  meta.json           what it was made from (task, source path/format/checksums, options,
                      tokenizer, format_version), the spec (vocab_size, seq_len, num_classes,
                      dual, pad_id), split sizes, and `arrays`: each file's shape, dtype, size
                      and digests (tasks.contract.integrity)
  <split>.<key>.npy   key in {inputs, label}, or {inputs1, inputs2, label} for dual tasks
Opening a cache checks every array cheaply against meta.json, so a damaged file is a one-line
error naming it and the command that rebuilds the cache, before any training starts.
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np

from lra import errors
from lra.tasks.contract import integrity
from lra.tasks.contract.spec import TaskSpec

META_FILE = "meta.json"
FORMAT_VERSION = 2  # 2: meta.json records every array's shape, dtype, size and digests
SPLITS = ("train", "val", "test")
_REQUIRED = {"task": str, "vocab_size": int, "seq_len": int, "num_classes": int, "splits": dict,
             "arrays": dict, "source": dict, "options": dict, "tokenizer": str}


class DataMissingError(errors.NotFound):
  """The cache is absent; the message says which command makes it."""


class CacheDamagedError(errors.BadValue):
  """A cache file does not match meta.json (or meta.json is unreadable); one line with the fix."""

  def __init__(self, path: Path, problem: str, command: str):
    self.path, self.problem, self.command = Path(path), problem, command
    super().__init__(f"{path}: {problem}. Rebuild the cache: {command}")


class CacheWriteError(errors.UserError, OSError):
  """Writing a new cache failed (a full disk, a read-only folder); the old cache is untouched."""

  def __init__(self, path: Path, error: OSError):
    super().__init__(f"Could not write {path}: {error.strerror or error}. The previous cache, if "
                     f"any, is unchanged; free space or fix permissions and run the same command "
                     f"again.")
    self.errno = error.errno


def array_path(cache_dir: Path, split: str, key: str) -> Path:
  return Path(cache_dir) / f"{split}.{key}.npy"


def input_keys(dual: bool) -> tuple[str, ...]:
  return ("inputs1", "inputs2") if dual else ("inputs",)


def array_files(meta: dict) -> list[str]:
  """The file names a cache with this meta must hold."""
  return [array_path(Path(), split, key).name for split in meta["splits"]
          for key in (*input_keys(bool(meta.get("dual"))), "label")]


def read_meta(cache_dir: Path) -> dict | None:
  """meta.json of a cache, or None when there is none.

  Raises:
    ValueError saying why meta.json is unusable: not JSON, another format version, keys or
    arrays missing.
  """
  path = Path(cache_dir) / META_FILE
  try:
    meta = json.loads(path.read_text())
  except FileNotFoundError:
    return None
  except json.JSONDecodeError as e:
    raise ValueError(f"not valid JSON ({e.msg} at line {e.lineno})") from None
  except UnicodeDecodeError:
    raise ValueError("not text") from None
  if not isinstance(meta, dict):
    raise ValueError("not a JSON object")
  if meta.get("format_version") != FORMAT_VERSION:
    raise ValueError(f"written by another version of the suite (cache format "
                     f"{meta.get('format_version')}; this one reads {FORMAT_VERSION})")
  missing = [key for key in _REQUIRED if key not in meta]
  if missing:
    raise ValueError(f"lacks {', '.join(missing)}")
  wrong = [key for key, kind in _REQUIRED.items() if not isinstance(meta[key], kind)]
  if wrong:
    raise ValueError(f"has malformed {', '.join(wrong)}")
  if sorted(meta["arrays"]) != sorted(array_files(meta)):
    raise ValueError(f"lists arrays {sorted(meta['arrays'])}, expected {array_files(meta)}")
  return meta


def rebuild_command(cache_dir: Path, meta: dict) -> str:
  """The `lra data prepare` command that remakes this cache where it is, as it was made."""
  cache_dir = Path(cache_dir)
  task = meta["task"]
  words = ["lra", "data", "prepare", task, "--source", meta["source"].get("path", "PATH"),
           "--data-dir", str(cache_dir.parent)]
  if cache_dir.name != task:
    words += ["--cache-name", cache_dir.name]
  for key, value in meta["options"].items():
    words += ["--option", f"{key}={value}"]
  return shlex.join(words)


class PreparedData:
  """A complete, checked cache folder: its meta, spec and memory-mapped split arrays.

  Raises (on construction):
    DataMissingError: there is no cache at cache_dir.
    CacheDamagedError: meta.json is unusable or an array does not match it (cheap check).
  """

  def __init__(self, cache_dir: Path, hint: str = ""):
    self.cache_dir = Path(cache_dir)
    meta_path = self.cache_dir / META_FILE
    try:
      meta = read_meta(self.cache_dir)
    except ValueError as e:
      where = f"--data-dir {self.cache_dir.parent} --cache-name {self.cache_dir.name}"
      fix = (f"{' '.join(hint.split())} (with {where})" if hint
             else f"lra data prepare TASK --source PATH {where}")
      raise CacheDamagedError(meta_path, str(e), fix) from None
    if meta is None:
      raise DataMissingError(
          f"No prepared data at {self.cache_dir} (expected {META_FILE} and "
          f"<split>.<key>.npy files there).\n{hint}".rstrip())
    command = rebuild_command(self.cache_dir, meta)
    for name, entry in meta["arrays"].items():
      try:
        problem = integrity.problem(self.cache_dir / name, entry)
      except (KeyError, TypeError):
        raise CacheDamagedError(meta_path, f"its entry for {name} is malformed", command) from None
      if problem:
        raise CacheDamagedError(self.cache_dir / name, problem, command)
    self.meta = meta
    self.spec = TaskSpec.from_meta(meta)

  @property
  def input_keys(self) -> tuple[str, ...]:
    return input_keys(self.spec.dual)

  def split(self, name: str) -> dict[str, np.ndarray]:
    if name not in self.meta["splits"]:
      raise errors.UnknownName(f"Split '{name}' not in {self.cache_dir} "
                               f"(has: {', '.join(self.meta['splits'])})")
    return {key: np.load(array_path(self.cache_dir, name, key), mmap_mode="r")
            for key in (*self.input_keys, "label")}

  def num_examples(self, split: str) -> int:
    return int(self.meta["splits"][split])

  def verify(self) -> dict[str, str | None]:
    """{file name: problem or None} from a full sha256 of every array (seconds per GB)."""
    return {name: integrity.problem(self.cache_dir / name, entry, full=True)
            for name, entry in self.meta["arrays"].items()}
