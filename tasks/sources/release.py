"""Finding files inside a user's copy of the LRA release, whichever way it was unpacked.

The archive unpacks to `lra_release/lra_release/...`; users point `--source` at the outer folder,
the inner one, or the task's own folder. We accept all three.
"""
from __future__ import annotations

from pathlib import Path


def find_in_release(source: Path, relative: str, what: str, command: str) -> Path:
  """Returns `source/<prefix>/relative` for the first prefix that exists.

  Args:
    source: the path the user gave.
    relative: the path inside the release root, e.g. "listops-1000" or "tsv_data".
    what: a few words naming the expected content, for the error.
    command: the command that fixes a missing source, for the error.
  Raises:
    FileNotFoundError naming every place looked at.
  """
  source = Path(source).expanduser()
  if not source.exists():
    raise FileNotFoundError(f"Source path {source} does not exist. Expected {what}.\n"
                            f"Try: {command}")
  tail = Path(relative)
  candidates = [source / tail, source / "lra_release" / tail,
                source / "lra_release" / "lra_release" / tail]
  if source.name == tail.name:
    candidates.insert(0, source)
  for candidate in candidates:
    if candidate.exists():
      return candidate
  looked = "\n  ".join(str(c) for c in candidates)
  raise FileNotFoundError(f"Could not find {what} under {source}. Looked at:\n  {looked}\n"
                          f"Try: {command}")
