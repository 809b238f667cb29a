"""Where in a user's own code an error was raised: the last frame of a traceback that is neither
this suite's nor an installed package's nor Python's, so `lra check` and `lra run` can name the
file and line of a user's mixer instead of a frame deep inside JAX."""
from __future__ import annotations

import os
import site
import sysconfig
import traceback
from pathlib import Path

_SUITE = str(Path(__file__).resolve().parents[1])  # lra/ (tasks, models, configs install inside)
_REPOSITORY = str(Path(__file__).resolve().parents[2])  # a checkout: its tasks/, models/, ...


def _installed() -> tuple[str, ...]:
  """Python's own library and the folders packages install into, each ending in a separator.
  Not everything under sys.prefix: with a system Python that is /usr (or /usr/local), where a
  container keeps a user's code (/usr/src/app)."""
  folders = [sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
  folders += [*site.getsitepackages(), site.getusersitepackages()]
  return tuple({os.path.join(os.path.realpath(p), "") for p in folders if p})


def _ours(filename: str) -> bool:
  path = os.path.realpath(filename)
  if path.startswith(_installed()) or filename.startswith("<"):
    return True
  if path.startswith(_SUITE):
    return True
  # A checkout's own folders (tasks/, models/, configs/, and the scripts of tools/) are the
  # suite's; its tests/ (which stand in for users) and a user's folder beside them are not.
  relative = os.path.relpath(path, _REPOSITORY)
  return relative.split(os.sep)[0] in ("tasks", "models", "configs", "tools")


def user_frame(error: BaseException) -> traceback.FrameSummary | None:
  """The innermost frame of `error`'s traceback in a user's own file, or None."""
  frames = [f for f in traceback.extract_tb(error.__traceback__) if not _ours(f.filename)]
  return frames[-1] if frames else None


def where(frame: traceback.FrameSummary) -> str:
  """"my_layers/mean_gate.py:21 in __call__": the frame's file (relative to the working folder
  when under it) and line."""
  path = os.path.realpath(frame.filename)
  cwd = os.getcwd() + os.sep
  shown = path[len(cwd):] if path.startswith(cwd) else frame.filename
  return f"{shown}:{frame.lineno} in {frame.name}"
