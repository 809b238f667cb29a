"""Orbax checkpoints of the train state: `<run dir>/checkpoints/` (latest) and `.../best/`.

Resume order: the latest saved step wins; the data stream and dropout rng are functions of the
step, so nothing else needs saving. Run bookkeeping (best validation so far, wall time, the
partial metrics window) rides along as JSON.

What a crash can leave, and the Orbax guarantees (orbax-checkpoint 0.9-0.12) this relies on:
- A checkpoint is written into `<step>.orbax-checkpoint-tmp-*` and renamed to `<step>` only when
  complete. With many processes, each writes its part, all wait at a barrier
  (`async_write_complete`), and only then does process 0 rename: a step folder exists only once
  every process has finished writing it. Orbax lists step folders only, never temporary ones, so
  a half-written checkpoint (a kill, a lost host, a full disk) is never resumed from; the next
  start deletes such leftovers (`cleanup_tmp_directories`).
- Older checkpoints beyond `keep` are deleted only after the new one is committed: a failed write
  leaves the previous checkpoint as it was.

What a damaged disk can leave (a file cut short, deleted or overwritten after the commit), which
Orbax does not catch by itself (TensorStore may read changed bytes as numbers):
- Once a save is complete, process 0 seals it: `lra_manifest.json` in the step folder lists every
  file's size and sha256. A restore checks the folder against it first; a checkpoint that was
  never sealed (killed before) is checked by reading it.
- Resuming walks the latest checkpoints newest first, moves each damaged one to
  `checkpoints/damaged/<step>-<UTC time>/` (never deleted) and restores the newest intact one; if
  none is intact the run stops, and the same command then starts again from step 0. The best
  checkpoint is restored only by `lra eval --checkpoint best`, which names a damaged one and stops.
  When Orbax's own read fails, TensorStore's reads still in flight finish on its threads into the
  event loop Orbax has closed; Python's reports of those ("Event loop is closed"), and only those,
  are dropped (`drop_closed_loop_reports`, from the read on): the damage is said once, in one
  line.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import shlex
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from lra import errors
from lra.machine import distributed
from lra.runs import writers
from lra.base import manifest

MANIFEST = "lra_manifest.json"
DAMAGED = "damaged"


class CheckpointWriteError(errors.UserError, OSError):
  """A checkpoint could not be written (disk full, permissions); the previous one is intact."""


class CheckpointDamagedError(errors.UserError, OSError):
  """No checkpoint could be restored: the one asked for, or every latest one, is damaged."""


def _manager(directory: Path, keep: int, name: str) -> ocp.CheckpointManager:
  # Orbax names its cross-process barriers after the step folder, so the latest and the best
  # managers saving the same step would meet at each other's barriers without their own prefix.
  return ocp.CheckpointManager(
      directory, options=ocp.CheckpointManagerOptions(
          max_to_keep=keep, create=True, cleanup_tmp_directories=True,
          multiprocessing_options=ocp.options.MultiprocessingOptions(
              barrier_sync_key_prefix=name)),
      item_names=("state", "bookkeeping"))


class Checkpointer:
  """Latest-step checkpoints (the last `keep`) and the best-validation one."""

  def __init__(self, run_dir: Path, keep: int = 2):
    self.root = Path(run_dir).resolve() / "checkpoints"
    self.manager = _manager(self.root, keep, "latest")
    self.best = _manager(self.root / "best", 1, "best")
    self.failed = False
    # Saves of this process not yet listed in a manifest, with their manager.
    self._unsealed: dict[Path, ocp.CheckpointManager] = {}

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def best_step(self) -> int | None:
    return self.best.latest_step()

  def committed_step(self) -> int | None:
    """The latest step on disk that every process finished writing (read from the folder: the
    manager's own list already holds saves still in flight)."""
    return max(_steps_in(self.root), default=None)

  def save(self, step: int, state: Any, bookkeeping: dict, *, best: bool = False) -> None:
    """Saves asynchronously; `best=True` saves to the best folder instead of the latest.

    Raises:
      CheckpointWriteError: this save, or the previous one still being written, failed.
    """
    manager = self.best if best else self.manager
    if manager.latest_step() == step:
      return  # already saved at this step (e.g. an interrupt right after a scheduled save)
    with self._reporting(manager):  # Orbax raises a failed background write at the next save
      manager.wait_until_finished()  # Orbax waits for the previous save anyway; seal it first
      self.seal()
      manager.save(step, args=ocp.args.Composite(
          state=ocp.args.StandardSave(state), bookkeeping=ocp.args.JsonSave(bookkeeping)))
    self._unsealed[Path(str(manager.directory)) / str(step)] = manager

  def seal(self) -> None:
    """Writes the manifest of every save of this process that Orbax has finished (process 0;
    cheap to call at any time: a save still being written waits for the next call)."""
    for folder, manager in list(self._unsealed.items()):
      if manager.is_saving_in_progress():
        continue
      del self._unsealed[folder]
      if folder.is_dir() and jax.process_index() == 0:  # else a later save replaced it
        writers.write_json_atomic(folder / MANIFEST,
                                  {"files": manifest.entries(folder, skip=MANIFEST)})

  def restore(self, step: int, abstract_state: Any, *, best: bool = False) -> tuple[Any, dict]:
    """The checkpoint of `step`, checked against its manifest first.

    Raises:
      CheckpointDamagedError: a file is missing, cut short or changed, or (no manifest) Orbax
        could not read it; the message names the folder and the file.
    """
    manager = self.best if best else self.manager
    folder = Path(str(manager.directory)) / str(step)
    problem = _agreed(damage(folder))
    if problem is None:
      # In place while Orbax reads: a failing read's stragglers report during the call and after.
      undo = drop_closed_loop_reports()
      try:
        restored = manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state), bookkeeping=ocp.args.JsonRestore()))
      except Exception as error:  # pylint: disable=broad-except
        # Sealed and intact, yet unreadable: not damage (another model, a newer Orbax); as is.
        if (folder / MANIFEST).exists() or distributed.lost_peer(error):
          raise
        problem = _agreed(f"Orbax cannot read it: {_first_line(error)}")
      else:
        undo()  # every read finished: nothing can report later
        problem = _agreed(None)
    if problem is not None:
      raise CheckpointDamagedError(
          f"the checkpoint of step {step} in {folder} is damaged ({problem})")
    return restored.state, dict(restored.bookkeeping)

  def restore_latest(self, abstract_state: Any, log: Callable[[str], None]
                     ) -> tuple[Any, dict, int] | None:
    """The newest intact latest-step checkpoint (state, bookkeeping, step), or None if there is
    none at all. Each damaged one on the way is moved to `checkpoints/damaged/` and logged.

    Raises:
      CheckpointDamagedError: there were checkpoints, and every one is damaged.
    """
    damaged = []
    for step in sorted(_steps_in(self.root), reverse=True):
      try:
        state, book = self.restore(step, abstract_state)
      except CheckpointDamagedError as error:
        damaged.append(f"{error}; moved to {self._move_aside(step)}")
        log(f"lra: {damaged[-1]}")
        continue
      if damaged:
        log(f"lra: resuming from step {step}, the newest intact checkpoint")
      return state, book, step
    if damaged:
      command = shlex.join(["lra", *sys.argv[1:]])
      raise CheckpointDamagedError(
          f"no intact checkpoint in {self.root} ({len(damaged)} damaged, moved to "
          f"{self.root / DAMAGED}, not deleted); the same command now starts the run again from "
          f"step 0: {command}")
    return None

  def set_aside_damaged_best(self, log: Callable[[str], None]) -> None:
    """Moves a damaged best checkpoint out of Orbax's reach (saving the next best would delete
    it), so nothing is lost; a run checks this when it starts."""
    step = self.best_step()
    if step is not None:
      problem = _agreed(damage(self.root / "best" / str(step)))
      if problem is not None:
        log(f"lra: the best checkpoint (step {step}) is damaged ({problem}); moved to "
            f"{self._move_aside(step, best=True)}; the next better validation saves a new one")

  def _move_aside(self, step: int, *, best: bool = False) -> Path:
    """checkpoints/<step> (or best/<step>) to checkpoints/damaged/[best-]<step>-<UTC time>."""
    manager = self.best if best else self.manager
    now = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    target = self.root / DAMAGED / f"{'best-' if best else ''}{step}-{now}"
    if jax.process_index() == 0:
      target.parent.mkdir(exist_ok=True)
      (Path(str(manager.directory)) / str(step)).rename(target)
    if jax.process_count() > 1:
      multihost_utils.sync_global_devices(f"lra_checkpoint_moved_{step}_{best}")
    manager.reload()  # Orbax lists its steps once; it must not resume or delete the moved one
    return target

  def wait(self) -> None:
    for manager in (self.manager, self.best):
      with self._reporting(manager):
        manager.wait_until_finished()
    self.seal()

  def close(self) -> None:
    """Waits for saves in flight and seals them, then closes. After a failed write it still waits,
    ignoring the error it has already reported: Orbax's background writes left pending when the
    interpreter exits print tracebacks ("Event loop is closed") after the run's one-line error."""
    if not self.failed:
      self.wait()
    else:
      for manager in (self.manager, self.best):
        try:
          manager.wait_until_finished()
        except Exception:  # pylint: disable=broad-except
          pass
    for manager in (self.manager, self.best):
      try:
        manager.close()
      except Exception:  # pylint: disable=broad-except
        if not self.failed:
          raise

  @contextlib.contextmanager
  def _reporting(self, manager: ocp.CheckpointManager) -> Iterator[None]:
    """Turns an error from Orbax's save (this one, or the previous one still being written, which
    Orbax raises at the next save) into a CheckpointWriteError that names the folder, the
    checkpoint that survives and the fix. A lost peer stays what it is."""
    try:
      yield
    except Exception as error:  # pylint: disable=broad-except
      if distributed.lost_peer(error):
        raise
      self.failed = True
      folder = Path(str(manager.directory))
      kept = _steps_in(self.root)  # resuming reads the latest folder, whichever save failed
      survivor = (f"the checkpoint of step {max(kept)} is intact and the run resumes from it"
                  if kept else "there is no earlier checkpoint, so the run restarts from step 0")
      cause = str(error).strip().splitlines()[0] if str(error).strip() else ""
      raise CheckpointWriteError(
          f"could not write a checkpoint in {folder} ({type(error).__name__}: {cause}); "
          f"{survivor}. Free disk space or fix the folder's permissions, then run the same "
          "command again.") from None


def drop_closed_loop_reports() -> Callable[[], None]:
  """From now on, drops Python's reports of `RuntimeError: Event loop is closed` raised by
  asyncio's own check, and passes every other report on (to the hook that was in place); returns
  a function that puts that hook back.

  When an Orbax read fails, TensorStore completes the reads still in flight on its own threads
  and posts each result to the event loop Orbax closes with the error: asyncio raises there, with
  no Python caller to catch it, and Python prints each one as an unraisable exception (dozens of
  tracebacks, during the read and after it, around the one line that says the checkpoint is
  damaged). The read's own error is not one of them and is reported as before.
  """
  previous = sys.unraisablehook
  if getattr(previous, "drops_closed_loop_reports", False):
    return lambda: None  # already in place (an earlier failed read): it stays

  def hook(unraisable) -> None:
    if not _closed_loop(unraisable.exc_value, unraisable.exc_traceback):
      previous(unraisable)
  hook.drops_closed_loop_reports = True
  sys.unraisablehook = hook

  def undo() -> None:
    if sys.unraisablehook is hook:
      sys.unraisablehook = previous
  return undo


def _closed_loop(error: BaseException | None, trace) -> bool:
  """asyncio's RuntimeError for a closed loop, raised by its own check (not merely the words)."""
  if not isinstance(error, RuntimeError) or str(error) != "Event loop is closed":
    return False
  frames = traceback.extract_tb(trace)
  return bool(frames) and frames[-1].name == "_check_closed" and (
      Path(frames[-1].filename).parent.name == "asyncio")


def _steps_in(folder: Path) -> list[int]:
  """Committed steps: Orbax renames a checkpoint to its bare step number once complete."""
  return [int(p.name) for p in folder.glob("*") if p.name.isdigit() and p.is_dir()]


def damage(folder: Path) -> str | None:
  """What is wrong with a sealed checkpoint folder (first problem found), or None: intact, or not
  sealed (Orbax's own reading is then the only check)."""
  seal = folder / MANIFEST
  if not seal.exists():
    return None
  try:
    files = json.loads(seal.read_text())["files"]
  except (OSError, ValueError, KeyError, TypeError):
    return f"its {MANIFEST} is unreadable"
  return manifest.first_problem(folder, files)


def _agreed(problem: str | None) -> str | None:
  """Multi-host: every process reads the same files, but all must take the same branch, so one
  that finds a problem speaks for all."""
  if jax.process_count() == 1:
    return problem
  flags = multihost_utils.process_allgather(np.asarray(problem is not None))
  if problem is None and np.any(flags):
    return "another process found it damaged"
  return problem


def _first_line(error: BaseException) -> str:
  text = str(error).strip()
  return (text.splitlines()[0] if text else type(error).__name__)[:300]
