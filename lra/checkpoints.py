"""Orbax checkpoints of the train state: `<run dir>/checkpoints/` (latest) and `.../best/`.

Resume order: the latest saved step wins; the data stream and dropout rng are functions of the
step, so nothing else needs saving. Run bookkeeping (best validation so far, wall time, the
partial metrics window) rides along as JSON. A checkpoint cut short by a kill is never listed:
Orbax writes to a temporary folder and renames it when complete.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import orbax.checkpoint as ocp


def _manager(directory: Path, keep: int) -> ocp.CheckpointManager:
  return ocp.CheckpointManager(
      directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True),
      item_names=("state", "bookkeeping"))


class Checkpointer:
  """Latest-step checkpoints (the last `keep`) and the best-validation one."""

  def __init__(self, run_dir: Path, keep: int = 2):
    root = Path(run_dir).resolve() / "checkpoints"
    self.manager = _manager(root, keep)
    self.best = _manager(root / "best", 1)

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def best_step(self) -> int | None:
    return self.best.latest_step()

  def save(self, step: int, state: Any, bookkeeping: dict, *, best: bool = False) -> None:
    """Saves asynchronously; `best=True` saves to the best folder instead of the latest."""
    manager = self.best if best else self.manager
    if manager.latest_step() == step:
      return  # already saved at this step (e.g. an interrupt right after a scheduled save)
    manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), bookkeeping=ocp.args.JsonSave(bookkeeping)))

  def restore(self, step: int, abstract_state: Any, *, best: bool = False) -> tuple[Any, dict]:
    manager = self.best if best else self.manager
    restored = manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state), bookkeeping=ocp.args.JsonRestore()))
    return restored.state, dict(restored.bookkeeping)

  def wait(self) -> None:
    self.manager.wait_until_finished()
    self.best.wait_until_finished()

  def close(self) -> None:
    self.manager.close()
    self.best.close()
