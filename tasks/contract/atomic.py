"""Replacing a folder whole: write a new one beside it, then swap, so a crash never leaves a mix.

`replacing(target)` yields `.<name>.tmp-<pid>@<host>` beside the target; when the block ends
without an exception the folder's files are synced to disk and it takes the target's place:
  1. the old target (if any) is renamed to `.<name>.old-<pid>@<host>`,
  2. the new folder is renamed to the target,
  3. the old one is deleted.
A process killed at any moment (kill -9, a lost node) therefore leaves at the target either the old
complete folder or none (between 1 and 2), never a partial one. The next `replacing` of the same
target removes what a dead process on this host left, and puts an `.old-` folder back when the
target is missing, so an interrupted replace costs nothing. Leftovers of live processes (two
prepares of one cache at once: the last to finish wins) and of other hosts are left alone.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

from lra import errors

_TMP, _OLD = ".tmp-", ".old-"


def _owner() -> str:
  return f"{os.getpid()}@{socket.gethostname()}"


def _dead_owner(tag: str) -> bool:
  """True when the pid@host that made a leftover is a process of this host that has ended."""
  pid, _, host = tag.partition("@")
  if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
    return False
  try:
    os.kill(int(pid), 0)  # signal 0 only asks whether the process exists
  except ProcessLookupError:
    return True
  except PermissionError:
    return False  # it exists, under another user
  return False


def recover(target: Path, log=lambda msg: print(msg, file=sys.stderr)) -> None:
  """Cleans up after replaces of `target` that a dead process of this host left unfinished."""
  target = Path(target)
  if not target.parent.is_dir():
    return
  siblings = sorted(target.parent.iterdir())
  for kind in (_OLD, _TMP):  # .old first: it may become the target again
    prefix = f".{target.name}{kind}"
    for leftover in siblings:
      if not leftover.name.startswith(prefix) or not _dead_owner(leftover.name[len(prefix):]):
        continue
      if kind == _OLD and not target.exists():
        os.rename(leftover, target)
        log(f"{target}: restored the complete folder an interrupted replace had moved aside.")
      else:
        shutil.rmtree(leftover, ignore_errors=True)
        log(f"{target}: removed {leftover.name}, left by an interrupted process.")


def _sync(folder: Path) -> None:
  """Flushes every file of folder, and the folder itself, to disk (survives a power cut too)."""
  for path in folder.iterdir():
    if path.is_file():
      with open(path, "rb") as f:
        os.fsync(f.fileno())
  _sync_dir(folder)


def _sync_dir(folder: Path) -> None:
  try:
    fd = os.open(folder, os.O_RDONLY)
  except OSError:
    return  # some systems cannot open a folder; the rename is still atomic there
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


def _swap(new: Path, target: Path) -> None:
  old = target.parent / f".{target.name}{_OLD}{_owner()}"
  for _ in range(5):  # another process may put its own folder in place between our two renames
    moved = False
    if target.exists():
      try:
        os.rename(target, old)
        moved = True
      except FileNotFoundError:
        pass  # another process moved it aside first
    try:
      os.rename(new, target)
      break
    except OSError:
      if not target.exists():  # not a race: put the old folder back and report
        if moved:
          os.rename(old, target)
        raise
      if moved:
        shutil.rmtree(old, ignore_errors=True)
  else:
    raise errors.Conflict(f"Could not put {new} in place of {target}: other processes keep "
                          "replacing it; run one prepare at a time.")
  _sync_dir(target.parent)
  if old.exists():
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def replacing(target: Path, log=lambda msg: print(msg, file=sys.stderr)) -> Iterator[Path]:
  """Yields an empty folder beside `target` that replaces it whole when the block succeeds.

  On an exception (or KeyboardInterrupt) the new folder is deleted and the target is untouched.
  """
  target = Path(target).expanduser()
  if target.is_symlink():
    target = target.resolve()  # replace the folder the link points to, not the link
  if target.exists() and not target.is_dir():
    raise errors.Conflict(f"{target} exists and is not a folder.")
  target.parent.mkdir(parents=True, exist_ok=True)
  recover(target, log)
  new = target.parent / f".{target.name}{_TMP}{_owner()}"
  shutil.rmtree(new, ignore_errors=True)
  new.mkdir()
  try:
    yield new
    _sync(new)
    _swap(new, target)
  except BaseException:
    shutil.rmtree(new, ignore_errors=True)
    raise
