"""Task registry: `TASKS[name]` is the `Task` of tasks/sources/<name>.py or tasks/generators/
<name>.py (six LRA tasks + extras), and `prepared`, a task's checked cache (generated first for the
small presets that make their own data)."""
from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lra import errors
from lra.tasks.generators import synthetic
from lra.tasks.sources import image, listops, pathfinder, pathx, retrieval, text
from lra.tasks.contract.cache import CacheDamagedError, DataMissingError, PreparedData
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


# What users call a task's data (its dataset's or archive's name): the task it is.
ALIASES = {"imdb": "text", "aclimdb": "text", "imdb_reviews": "text", "aclimdb_v1": "text",
           "cifar": "image", "cifar10": "image", "cifar-10": "image", "cifar_10": "image",
           "aan": "retrieval", "path-x": "pathx", "path_x": "pathx", "pathfinder32": "pathfinder",
           "pathfinder128": "pathx", "listops-1000": "listops", "list_ops": "listops"}


def get_task(name: str) -> Task:
  """The registered task, or an error listing the valid names."""
  try:
    return TASKS[name]
  except KeyError:
    raise unknown_task(name) from None


def unknown_task(name: str) -> errors.UnknownName:
  """The error for a name that is no task: the task it most likely means ("did you mean text",
  for imdb), then the valid names."""
  guess = ALIASES.get(name.lower()) or next(iter(difflib.get_close_matches(name.lower(), TASKS,
                                                                           n=1)), None)
  hint = f" Did you mean {guess} ({TASKS[guess].description})?" if guess else ""
  return errors.UnknownName(f"Unknown task '{name}'.{hint} Valid tasks: "
                            f"{', '.join(sorted(TASKS))}")


def prepared(name: str, cache_dir: Path, generator: Mapping[str, Any] | None = None,
             log: Callable[[str], None] = print) -> PreparedData:
  """Task `name`'s prepared cache at `cache_dir`, checked. With `generator` (the settings of its
  small generated data) a missing or damaged cache is made again: the raw files first
  (`<cache_dir>_raw`), then the cache, each replaced whole, so a kill while generating leaves
  nothing half-written for the next call to trip on.

  Raises:
    DataMissingError, CacheDamagedError: no usable cache and nothing to generate it from.
  """
  task = get_task(name)
  try:
    return PreparedData(cache_dir, hint=task.data_hint)
  except (DataMissingError, CacheDamagedError) as problem:
    if generator is None or not task.generate_small:
      raise
    if isinstance(problem, CacheDamagedError):
      log(f"{name}: {problem.path.name} in {cache_dir} is damaged ({problem.problem}); "
          "generating the data again")
  raw_dir = cache_dir.with_name(cache_dir.name + "_raw")
  log(f"{name}: generating data in {raw_dir} (seeded, no download)")
  # The generator says where in raw_dir its output lies (a Pathfinder difficulty's folder, say).
  options = task.generate_small(raw_dir, **generator) or {}
  task.prepare_cache(raw_dir, cache_dir, **options)
  return PreparedData(cache_dir, hint=task.data_hint)


__all__ = ["TASKS", "Task", "TaskSpec", "get_task", "prepared", "unknown_task"]
