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
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

import orbax.checkpoint as ocp

from lra import distributed


class CheckpointWriteError(OSError):
  """A checkpoint could not be written (disk full, permissions); the previous one is intact."""


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
      manager.save(step, args=ocp.args.Composite(
          state=ocp.args.StandardSave(state), bookkeeping=ocp.args.JsonSave(bookkeeping)))

  def restore(self, step: int, abstract_state: Any, *, best: bool = False) -> tuple[Any, dict]:
    manager = self.best if best else self.manager
    restored = manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state), bookkeeping=ocp.args.JsonRestore()))
    return restored.state, dict(restored.bookkeeping)

  def wait(self) -> None:
    for manager in (self.manager, self.best):
      with self._reporting(manager):
        manager.wait_until_finished()

  def close(self) -> None:
    """Waits for saves in flight, then closes; after a failed write only closes (the failure has
    been reported, and waiting would raise it again)."""
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


def _steps_in(folder: Path) -> list[int]:
  """Committed steps: Orbax renames a checkpoint to its bare step number once complete."""
  return [int(p.name) for p in folder.glob("*") if p.name.isdigit() and p.is_dir()]
