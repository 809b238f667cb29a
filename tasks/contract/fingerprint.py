"""What a prepared cache was made from, and the check that makes `prepare` idempotent.

Single files (archives, TSVs, pickles, metadata) are recorded by sha256. Folders of many small files
(aclImdb's 100k reviews, Pathfinder's 200k PNGs) are recorded by a digest of every file's relative
path, size and mtime: reading them all again just to learn that nothing changed would cost as much
as preparing.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterable

from lra.tasks.contract.cache import FORMAT_VERSION, array_path, file_checksum, read_meta


def sha256_of(root: Path, files: Iterable[Path]) -> dict[str, str]:
  """{path relative to root: "sha256:<hex>"} for each file."""
  return {Path(f).relative_to(root).as_posix(): "sha256:" + file_checksum(f) for f in files}


def stat_digest(root: Path, files: Iterable[Path]) -> str:
  """"size+mtime:<count>:<hex>" over each file's (relative path, size, mtime), in order."""
  digest = hashlib.sha256()
  count = 0
  for f in files:
    try:
      st = os.stat(f)
      stamp = f"{st.st_size}\t{st.st_mtime_ns}"
    except FileNotFoundError:
      stamp = "missing"  # a listed file that is absent: skipped by the reader, yet a fact to track
    digest.update(f"{Path(f).relative_to(root).as_posix()}\t{stamp}\n".encode())
    count += 1
  return f"size+mtime:{count}:{digest.hexdigest()}"


def current_cache(out_dir: Path, source: dict, options: dict, tokenizer: str,
                  input_keys: tuple[str, ...]) -> dict | None:
  """The cache's meta if it was made from the same inputs with the same recipe, else None.

  Args:
    out_dir: the cache folder.
    source: the `source` entry the new meta would have (its path may differ: a moved copy of the
      same files is still up to date).
    options: the resolved prepare options.
    tokenizer: the tokeniser description.
    input_keys: ("inputs",) or ("inputs1", "inputs2").
  """
  meta = read_meta(out_dir)
  if meta is None or meta.get("format_version") != FORMAT_VERSION:
    return None
  old_source = meta.get("source", {})
  if (old_source.get("format") != source["format"]
      or old_source.get("checksums") != source["checksums"]
      or meta.get("options") != options or meta.get("tokenizer") != tokenizer):
    return None
  for split in meta.get("splits", {}):
    for key in (*input_keys, "label"):
      if not array_path(out_dir, split, key).exists():
        return None
  return meta


def report_up_to_date(task: str, out_dir: Path, source: Path) -> None:
  print(f"{task}: {out_dir} is up to date with {source}; nothing to do.", flush=True)
