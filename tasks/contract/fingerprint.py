"""What a prepared cache was made from: fingerprints of its source files.

Single files (archives, TSVs, pickles, metadata) are recorded by sha256. Folders of many small files
(aclImdb's 100k reviews, Pathfinder's 200k PNGs) are recorded by a digest of every file's relative
path, size and mtime: reading them all again just to learn that nothing changed would cost as much
as preparing. `tasks.contract.build` compares these with the ones a cache's meta.json records.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from lra.base.manifest import PREFIX, sha256_file


def sha256_of(root: Path, files: Iterable[Path]) -> dict[str, str]:
  """{path relative to root: "sha256:<hex>"} for each file."""
  return {Path(f).relative_to(root).as_posix(): PREFIX + sha256_file(f) for f in files}


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
