"""sha256 manifests: each file's size and sha256 when it was written, and what differs now.

Written once for the three records that keep one: a prepared cache's meta.json `arrays`
(tasks/contract/integrity.py, which adds each array's shape and a sampled digest), a checkpoint's
seal (lra_manifest.json, lra/runs/checkpoints.py) and a run's archive (lra_pack.json,
lra/runs/pack.py). An entry is {"bytes": size, "sha256": hex digest}; meta.json's digests carry a
"sha256:" prefix (its source fingerprints are of other kinds too), which `entry` writes when asked.

It lives in lra/base/, the room under every other: the data cache (lra.tasks), checkpoints and
packs (lra.runs) share it.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

PREFIX = "sha256:"  # meta.json's digests name their kind
_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
  """The sha256 of a file's bytes (hex), read in 1 MiB chunks: arrays run to gigabytes."""
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    while block := f.read(_CHUNK):
      digest.update(block)
  return digest.hexdigest()


def entry(content: Path | bytes, *, prefix: str = "") -> dict[str, int | str]:
  """{"bytes": size, "sha256": prefix + hex} of a file, or of bytes about to be written."""
  if isinstance(content, (bytes, bytearray)):
    return {"bytes": len(content), "sha256": prefix + hashlib.sha256(content).hexdigest()}
  return {"bytes": Path(content).stat().st_size, "sha256": prefix + sha256_file(content)}


def entries(folder: Path, *, skip: str | None = None) -> dict[str, dict[str, int | str]]:
  """{path relative to `folder`: entry} of every file under it, in sorted order, less the file
  named `skip` (the manifest itself)."""
  folder = Path(folder)
  return {path.relative_to(folder).as_posix(): entry(path)
          for path in sorted(folder.rglob("*")) if path.is_file() and path.name != skip}


def problem(path: Path, want: Mapping[str, int | str]) -> str | None:
  """What differs between the file at `path` and its entry, as the rest of a sentence naming the
  file ("is missing", "is cut short: ...", "has changed ..."), or None when it matches."""
  path = Path(path)
  if not path.is_file():
    return "is missing"
  size = path.stat().st_size
  if size != want["bytes"]:
    what = "cut short" if size < want["bytes"] else "longer than written"
    return f"is {what}: {size} bytes, {want['bytes']} when written"
  if sha256_file(path) != str(want["sha256"]).removeprefix(PREFIX):
    return "has changed since it was written (sha256 differs)"
  return None


def first_problem(folder: Path, files: Mapping[str, Mapping[str, int | str]]) -> str | None:
  """The first file under `folder` that differs from its entry in `files`, with what differs
  ("checkpoint/x is cut short: ..."), or None when all match."""
  for name, want in files.items():
    found = problem(Path(folder) / name, want)
    if found:
      return f"{name} {found}"
  return None
