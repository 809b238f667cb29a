"""Task registry: `TASKS[name]` is the `Task` of tasks/<name>.py (six LRA tasks + extras)."""
from __future__ import annotations

from tasks import listops, synthetic
from tasks.spec import Task, TaskSpec, TaskNotBuiltError


def _not_built(name: str, description: str) -> Task:
  return Task(name=name, description=description + " [not built yet]",
              data_hint=f"The '{name}' loader is not built yet.")


TASKS: dict[str, Task] = {
    "listops": listops.TASK,
    "text": _not_built("text", "Byte-level IMDb sentiment, 2 classes, length 4000"),
    "retrieval": _not_built("retrieval", "AAN document-pair citation match, 2 x 4000 bytes"),
    "image": _not_built("image", "Grayscale CIFAR-10 as 1024 pixel tokens, 10 classes"),
    "pathfinder": _not_built("pathfinder", "Pathfinder 32x32: are the two dots connected?"),
    "pathx": _not_built("pathx", "Path-X 128x128 (16,384 tokens): Pathfinder at scale"),
    "synthetic": synthetic.TASK,
}


def get_task(name: str) -> Task:
  """The registered task, or an error listing the valid names."""
  try:
    return TASKS[name]
  except KeyError:
    raise KeyError(f"Unknown task '{name}'. Valid tasks: {', '.join(sorted(TASKS))}") from None


__all__ = ["TASKS", "Task", "TaskSpec", "TaskNotBuiltError", "get_task"]
