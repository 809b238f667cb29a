"""Finding a task's files in what the user points `--source` at, whichever way it was unpacked.

The LRA release unpacks to `lra_release/lra_release/...` (some copies have one level only), and
users point `--source` at the outer folder, the inner one, or the task's own folder; IMDb and
CIFAR-10 copies may sit inside it too. Every task searches the same roots, in this order:
`source`, `source/lra_release`, `source/lra_release/lra_release`.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from lra import errors
from lra.tasks.sources import downloads

NESTINGS = ("", "lra_release", "lra_release/lra_release")
# Where the LRA authors publish the release (google-research/long-range-arena README; about 7.7 GB).
RELEASE_URL = downloads.LRA_RELEASE.url
Found = TypeVar("Found")


def locate(source: Path, find: Callable[[Path], Found | None], what: str, command: str,
           shown: str = "", download: downloads.Download = downloads.LRA_RELEASE) -> Found:
  """The first non-None `find(root)` over the release roots under source.

  Args:
    source: the path the user gave.
    find: looks for the task's files at one root (an existing path); None when they are not there.
    what: a few words naming the expected content, for the error.
    command: the command that fixes a missing source, for the error.
    shown: the path under each root that the error lists as looked at.
    download: what the user fetches the files in; a file given where a folder is expected (an
      archive not unpacked, a damaged download) is named with its size and sha256 beside it.
  Raises:
    FileNotFoundError naming every place looked at; ValueError for a file that is not the
    task's (its size and sha256, and what to do with it).
  """
  source = Path(source).expanduser()
  if not source.exists():
    raise errors.NotFound(f"Source path {source} does not exist. Expected {what}.\n"
                          f"Try: {command}")
  looked = []
  for nesting in NESTINGS:
    root = source / nesting if nesting else source
    found = find(root) if root.exists() else None
    if found is not None:
      return found
    looked.append(str(root / shown if shown else root))
  if source.is_file():
    with open(source, "rb") as f:
      gzipped = f.read(2) == b"\x1f\x8b"
    raise downloads.damaged(source, download, f"a file, not {what}" + (
        f"; a gzip archive: unpack it first ({download.unpack}) and point --source at the folder "
        "it makes" if gzipped else "; not a gzip archive either"), command)
  raise errors.NotFound(f"Could not find {what} under {source}. Looked at:\n  "
                        + "\n  ".join(looked) + f"\nTry: {command}")


def find_in_release(source: Path, relative: str, what: str, command: str) -> Path:
  """`root/relative` at the first release root that has it, or source itself when it is that
  folder (its name is relative's last part)."""
  tail = Path(relative)

  def find(root: Path) -> Path | None:
    if root.name == tail.name:
      return root
    return root / tail if (root / tail).exists() else None

  return locate(source, find, what, command, shown=tail.as_posix())
