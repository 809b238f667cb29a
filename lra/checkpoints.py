"""Orbax checkpoints of the train state in `<run dir>/checkpoints/`.

Resume order: the latest saved step wins; the data stream and dropout rng are functions of the
step, so nothing else needs saving. Run bookkeeping (best validation so far) rides along as JSON.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import orbax.checkpoint as ocp


class Checkpointer:
  """Latest-step checkpoints (keeps the last `max_to_keep`)."""

  def __init__(self, run_dir: Path, max_to_keep: int = 2):
    self.manager = ocp.CheckpointManager(
        Path(run_dir).resolve() / "checkpoints",
        options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True),
        item_names=("state", "bookkeeping"))

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def save(self, step: int, state: Any, bookkeeping: dict) -> None:
    self.manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), bookkeeping=ocp.args.JsonSave(bookkeeping)))

  def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict]:
    restored = self.manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state), bookkeeping=ocp.args.JsonRestore()))
    return restored.state, dict(restored.bookkeeping)

  def wait(self) -> None:
    self.manager.wait_until_finished()

  def close(self) -> None:
    self.manager.close()
