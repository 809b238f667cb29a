"""One owner per run directory: `<run dir>/lock` names the process training there.

A second `lra run` on the same folder stops at once, naming the holder; a lock whose holder is gone
(kill -9, a lost node) is taken over with a line saying so. In a multi-host run only process 0
takes it (the run directory is on a file system every host shares).

Whether a holder is gone: on the same host, its pid no longer runs (or now belongs to a process
started later). On another host, pids say nothing, so the holder refreshes the lock's modification
time every REFRESH_S seconds and a lock untouched for STALE_AFTER_S is stale. Its age is measured
against a file written just now in the same folder, so both times come from the same file server's
clock and the hosts' clocks need not agree.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import platform
import shlex
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from lra import errors

LOCK_NAME = "lock"
REFRESH_S = 30.0
STALE_AFTER_S = 120.0


class RunDirLocked(errors.Conflict):
  """Another live process holds the run directory."""


class RunDirUnwritable(errors.UserError, PermissionError):
  """The run directory (or its checkpoints folder) cannot be written."""


@dataclasses.dataclass
class Holder:
  """Who holds a lock: what the lock file says."""
  pid: int
  host: str
  started: str  # ISO 8601, UTC
  command: str = ""
  pid_start: str | None = None  # the process's start time in clock ticks since boot (Linux)

  def describe(self) -> str:
    command = f", running `{self.command}`" if self.command else ""
    return f"pid {self.pid} on host {self.host} (started {self.started}{command})"

  @classmethod
  def this_process(cls) -> Holder:
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return cls(pid=os.getpid(), host=platform.node(), started=now,
               command=shlex.join(["lra", *sys.argv[1:]]), pid_start=_pid_start(os.getpid()))


def _pid_start(pid: int) -> str | None:
  """Field 22 of /proc/PID/stat: tells a pid reused by a later process from the original."""
  try:
    stat = Path(f"/proc/{pid}/stat").read_text()
  except OSError:
    return None
  return stat.rsplit(")", 1)[1].split()[19]  # fields after the command name start at field 3


def _runs_here(holder: Holder) -> bool:
  try:
    os.kill(holder.pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    pass  # someone else's process: alive
  return holder.pid_start is None or _pid_start(holder.pid) in (None, holder.pid_start)


class RunDirLock:
  """Holds `<run_dir>/lock` while in the `with` block (only when `take` is true).

  Entering checks the folder can be written (it creates the lock file and probes `checkpoints/`),
  so a read-only or full folder is reported before any training.

  Raises (on entering):
    RunDirLocked: a live process holds the folder.
    RunDirUnwritable: the folder or its checkpoints cannot be written.
  """

  def __init__(self, run_dir: Path, *, take: bool = True,
               log: Callable[[str], None] = lambda line: print(line, file=sys.stderr)):
    self.run_dir, self.take, self.log = Path(run_dir), take, log
    self.path = self.run_dir / LOCK_NAME
    self.me = Holder.this_process()
    self._stop = threading.Event()
    self._refresher: threading.Thread | None = None
    self._made: list[Path] = []  # the folders taking the lock created, the run dir first

  def __enter__(self) -> RunDirLock:
    if self.take:
      self._acquire()
      self._refresher = threading.Thread(target=self._refresh, name="lra-run-lock",
                                         daemon=True)
      self._refresher.start()
    return self

  def __exit__(self, *exc) -> None:
    self.release()

  def release(self) -> None:
    """Removes the lock if it is still ours (idempotent)."""
    self._stop.set()
    if self.take and self._holder() == self.me:
      try:
        self.path.unlink()
      except FileNotFoundError:
        pass
      # A run that stopped before writing anything leaves none of the folders it made (the run
      # dir, and parents such as results/local/runs/text/latte), only emptied ones.
      for folder in self._made:
        try:
          folder.rmdir()
        except OSError:
          break  # not empty: the run (or another) wrote files there
    self.take = False

  def _acquire(self) -> None:
    try:
      self._made = [p for p in (self.run_dir, *self.run_dir.parents) if not p.exists()]
      self.run_dir.mkdir(parents=True, exist_ok=True)
      taken = self._create()
    except OSError as e:
      raise RunDirUnwritable(_unwritable(self.run_dir, e)) from None
    if not taken:
      self._take_over()
    self._probe_checkpoints()

  def _take_over(self) -> None:
    holder = self._holder()
    reason = self._gone(holder)
    if reason is None:
      raise RunDirLocked(
          f"{self.run_dir} is in use by {holder.describe() if holder else 'another process'}. "
          f"Wait for it to finish or stop it; if it no longer runs, delete {self.path} (a lock "
          f"from another host is taken over by itself once unrefreshed for {STALE_AFTER_S:.0f} "
          "s).")
    if self._holder() != holder:  # someone else took it over meanwhile
      raise RunDirLocked(f"{self.run_dir} was just taken by {self._holder_text()}.")
    self.log(f"taking over {self.path} from {holder.describe() if holder else 'an unreadable lock'}"
             f": {reason}")
    try:
      self._write(replace=True)
    except OSError as e:
      raise RunDirUnwritable(_unwritable(self.run_dir, e)) from None

  def _create(self) -> bool:
    """Creates the lock with its content in one step (a hard link is atomic, NFS included)."""
    return self._write(replace=False)

  def _write(self, *, replace: bool) -> bool:
    tmp = self.run_dir / f".{LOCK_NAME}.{platform.node()}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    tmp.write_text(json.dumps(dataclasses.asdict(self.me), indent=2) + "\n")
    try:
      if replace:
        os.replace(tmp, self.path)
        return True
      try:
        os.link(tmp, self.path)
        return True
      except FileExistsError:
        return False
    finally:
      tmp.unlink(missing_ok=True)

  def held(self) -> bool:
    """Whether a live process holds the folder now (a lock a killed run left behind is not)."""
    return self.path.exists() and self._gone(self._holder()) is None

  def _holder(self) -> Holder | None:
    try:
      data = json.loads(self.path.read_text())
      return Holder(**{f.name: data[f.name] for f in dataclasses.fields(Holder) if f.name in data})
    except (OSError, ValueError, TypeError):
      return None

  def _holder_text(self) -> str:
    holder = self._holder()
    return holder.describe() if holder else "another process"

  def _gone(self, holder: Holder | None) -> str | None:
    """Why the holder no longer runs, or None if it may still."""
    age = self._age_s()
    if holder is None:  # unreadable: written by no version of this code, or damaged
      return (f"unreadable and unchanged for {age:.0f} s" if age is not None
              and age > STALE_AFTER_S else None)
    if holder.host == platform.node():
      return None if _runs_here(holder) else f"pid {holder.pid} no longer runs on this host"
    if age is not None and age > STALE_AFTER_S:
      return f"not refreshed for {age:.0f} s (more than {STALE_AFTER_S:.0f} s: its host is gone)"
    return None

  def _age_s(self) -> float | None:
    probe = self.run_dir / f".{LOCK_NAME}.clock.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    try:
      probe.write_text("")
      return probe.stat().st_mtime - self.path.stat().st_mtime
    except OSError:
      return None
    finally:
      probe.unlink(missing_ok=True)

  def _probe_checkpoints(self) -> None:
    folder = self.run_dir / "checkpoints"
    if not folder.is_dir():
      return
    probe = folder / f".write-test.{os.getpid()}"
    try:
      probe.write_text("")
      probe.unlink()
    except OSError as e:
      self.release()
      raise RunDirUnwritable(_unwritable(folder, e)) from None

  def _refresh(self) -> None:
    while not self._stop.wait(REFRESH_S):
      if self._holder() == self.me:
        try:
          os.utime(self.path)
        except OSError:
          pass  # a transient file-server error; the next refresh tries again


@contextlib.contextmanager
def hold(run_dir: Path, log: Callable[[str], None] | None = None) -> Iterator[RunDirLock]:
  """The run directory's lock for the `with` block: process 0 takes it, and in a multi-host run
  every process learns whether it could, so all stop together when it could not."""
  import jax  # deferred: the lock itself needs no devices
  from jax.experimental import multihost_utils
  import numpy as np
  lead = jax.process_index() == 0
  lock = RunDirLock(run_dir, take=lead, **({"log": log} if log else {}))
  error = None
  try:
    lock.__enter__()
  except (RunDirLocked, RunDirUnwritable) as e:
    error = e
  if jax.process_count() > 1:
    taken = bool(multihost_utils.broadcast_one_to_all(np.int32(error is None)))
    if not taken and error is None:
      error = RunDirLocked(f"process 0 could not take {lock.path}; its output says why.")
  if error is not None:
    raise error
  try:
    yield lock
  finally:
    lock.release()


def _unwritable(folder: Path, error: OSError) -> str:
  return (f"cannot write to {folder} ({error.strerror or error}); a run needs to write its "
          "lock, checkpoints and results there: fix its permissions or free space, or pass "
          "another --run-dir.")
