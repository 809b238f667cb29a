"""Run-directory files written so that a kill never leaves half a line or half a JSON file."""
from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol


def portable(word: str) -> str:
  """`word` without this machine in it: a path under the current folder becomes relative and one
  under the home folder starts with ~, so a committed record reads the same from any checkout."""
  cwd, home = os.getcwd() + os.sep, os.path.expanduser("~")
  if word.startswith(cwd):
    return word[len(cwd):]
  if word.startswith(home + os.sep):
    return "~" + word[len(home):]
  return word


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
  """Writes to a temporary file, fsyncs, then renames over the target.

  The temporary name is unique per host and process: after a lost peer, several survivors of a
  multi-host run may record the stop in the same final.json at once.
  """
  path = Path(path)
  tmp = path.with_name(f"{path.name}.{platform.node()}.{os.getpid()}.tmp")
  try:
    with open(tmp, "w") as f:
      json.dump(data, f, indent=2, sort_keys=True, default=_jsonable)
      f.write("\n")
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    tmp.unlink(missing_ok=True)  # a full disk must not also keep half a file around
    raise


def _jsonable(value: Any) -> Any:
  if hasattr(value, "item"):
    return value.item()
  raise TypeError(f"not JSON serialisable: {type(value).__name__}")


class Logger(Protocol):
  """Another home for the same records (lra/runs/loggers.py: TensorBoard, W&B)."""

  def write(self, step: int, metrics: Mapping[str, Any]) -> None: ...

  def close(self) -> None: ...


class MetricsWriter:
  """Appends one JSON object per log/eval point to metrics.jsonl (flat `split/metric` keys).

  Each line is written with a single write call and fsynced; a reader skips a torn last line.
  On resume, lines from steps after the checkpoint are dropped so the file matches the state.
  With `enabled=False` (processes other than 0 of a multi-host run) it touches nothing.
  Each record also goes to every one of `loggers` (opened for the same resume step); `close`
  closes them.
  """

  def __init__(self, path: Path, resume_step: int | None = None, *, enabled: bool = True,
               loggers: Sequence[Logger] = ()):
    self.path = Path(path)
    self.enabled = enabled
    self.loggers = list(loggers) if enabled else []
    if not enabled:
      return
    if resume_step is not None and self.path.exists():
      kept = [r for r in read_metrics(self.path) if r.get("step", 0) <= resume_step]
      tmp = self.path.with_name(self.path.name + ".tmp")
      with open(tmp, "w") as f:
        f.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))
        f.flush()
        os.fsync(f.fileno())
      os.replace(tmp, self.path)
    elif resume_step is None and self.path.exists():
      self.path.unlink()

  def write(self, step: int, metrics: Mapping[str, Any]) -> None:
    if not self.enabled:
      return
    line = json.dumps({"step": int(step), **metrics}, sort_keys=True, default=_jsonable) + "\n"
    with open(self.path, "a") as f:
      f.write(line)
      f.flush()
      os.fsync(f.fileno())
    for logger in self.loggers:
      logger.write(int(step), metrics)

  def close(self) -> None:
    loggers, self.loggers = self.loggers, []
    for logger in loggers:
      logger.close()


def read_metrics(path: Path) -> list[dict]:
  rows = []
  for line in Path(path).read_text().splitlines():
    try:
      rows.append(json.loads(line))
    except json.JSONDecodeError:
      continue  # a torn last line from a kill
  return rows


def git_sha(cwd: Path | None = None) -> str:
  """The commit of the code that ran, with '-dirty' when it had uncommitted changes outside
  results/."""
  cwd = cwd or Path(__file__).resolve().parent
  try:
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                         check=True).stdout.strip()
    # Results are written by runs and tables, not code: a deleted or regenerated result file
    # must not mark the code that ran as modified.
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                            ":(top)", ":(top,exclude)results"], cwd=cwd, capture_output=True,
                           text=True, check=True).stdout.strip()
    return sha + ("-dirty" if dirty else "")
  except (OSError, subprocess.CalledProcessError):
    return "unknown"


def environment() -> dict[str, Any]:
  """Where a result came from: device, host, versions, and the matmul precision in force
  ("default": the backend's own, TF32 for f32 on NVIDIA GPUs and bf16 passes on TPUs)."""
  import flax  # deferred, like jax: readers of run files (lra table, notebooks) need neither
  import jax
  import optax
  device = jax.devices()[0]
  return {
      "device": f"{device.platform}:{getattr(device, 'device_kind', '')}",
      "num_devices": jax.device_count(),
      # A CPU run's speed depends on the cores it may use (taskset, a scheduler's allocation).
      "cpu_cores": (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                    else os.cpu_count()),
      "matmul_precision": str(jax.config.jax_default_matmul_precision or "default"),
      "num_processes": jax.process_count(),
      "host": platform.node(),
      "python": platform.python_version(),
      "versions": {"jax": jax.__version__, "flax": flax.__version__, "optax": optax.__version__},
      "git_sha": git_sha(),
  }
