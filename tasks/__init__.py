"""Task registry: `TASKS[name]` is the `Task` of tasks/<name>.py (six LRA tasks + extras)."""
from __future__ import annotations

from lra import errors
from lra.tasks.generators import synthetic
from lra.tasks.sources import image, listops, pathfinder, pathx, retrieval, text
from lra.tasks.contract.spec import Task, TaskSpec

TASKS: dict[str, Task] = {
    "listops": listops.TASK,
    "text": text.TASK,
    "retrieval": retrieval.TASK,
    "image": image.TASK,
    "pathfinder": pathfinder.TASK,
    "pathx": pathx.TASK,
    "synthetic": synthetic.TASK,
}


def get_task(name: str) -> Task:
  """The registered task, or an error listing the valid names."""
  try:
    return TASKS[name]
  except KeyError:
    raise errors.UnknownName(f"Unknown task '{name}'. Valid tasks: "
                             f"{', '.join(sorted(TASKS))}") from None


__all__ = ["TASKS", "Task", "TaskSpec", "get_task"]
