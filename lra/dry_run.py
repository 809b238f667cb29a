"""`lra run TASK MIXER --dry-run`: the resolved config with where each value comes from, and the
data and run folders the run would use. Nothing is trained, generated or written."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Iterator, Sequence

from lra import run_identity
from lra.config_loading import (data_cache_dir, default_data_dir, default_run_dir, missing_data,
                                resolve_config)
from lra.configs import common

DEFAULT, PRESET, COMMAND_LINE = "default", "preset", "command line"
# What the command's own words choose (TASK, MIXER, --preset), not a setting.
NAMED_BY_COMMAND = ("task", "preset", "model.mixer")


@contextlib.contextmanager
def _base_configs(found: list[dict[str, Any]]) -> Iterator[None]:
  """Records what `common.base_config` returns while a task's get_config runs: the defaults,
  before the task's preset changes them. Task files call it as `common.base_config`."""
  original = common.base_config

  def recording(*args, **kwargs):
    config = original(*args, **kwargs)
    found.append(run_identity.flatten(config.to_dict()))
    return config
  common.base_config = recording
  try:
    yield
  finally:
    common.base_config = original


def sources(task: str, mixer: str, preset: str,
            overrides: Sequence[str] = ()) -> list[tuple[str, Any, str]]:
  """(key, value, source) for every key of the run's config, other mixers' blocks left out.

  source: "default" (configs/common.py:base_config), "preset" (the task's preset changed it) or
  "command line" (a --config override, or TASK / MIXER / --preset themselves).
  """
  config = resolve_config(task, mixer, preset, overrides)
  base: list[dict[str, Any]] = []
  with _base_configs(base):
    preset_config = run_identity.flatten(resolve_config(task, mixer, preset).to_dict())
  defaults = base[0] if base else {}
  flat = run_identity.flatten(config.to_dict())
  own = f"mixers.{config.model.mixer}."
  rows = []
  for key, value in sorted(flat.items()):
    if key.startswith("mixers.") and not key.startswith(own):
      continue  # other mixers' settings are not part of this run
    named = key in NAMED_BY_COMMAND or key.startswith("mixer_source.")
    if named or preset_config.get(key) != value:
      source = COMMAND_LINE
    elif key in defaults and defaults[key] != value:
      source = PRESET
    elif key not in defaults and not key.startswith(own):  # a block the preset filled in
      source = PRESET
    else:
      source = DEFAULT
    rows.append((key, value, source))
  return rows


def _run_folder_state(run_dir: Path) -> str:
  final = run_dir / "final.json"
  if final.exists():
    try:
      record = json.loads(final.read_text())
      return f"exists, {record.get('status')} at step {record.get('step')}: `lra run` " + (
          "skips it" if record.get("status") == "complete" else "resumes it")
    except (OSError, ValueError):
      return "exists, final.json unreadable"
  return "exists, no final.json yet" if run_dir.exists() else "new"


def describe(task: str, mixer: str, preset: str, overrides: Sequence[str] = (), *,
             results_dir: Path, run_dir: Path | None = None,
             data_dir: Path | None = None) -> str:
  """The dry run's text: run folder, data cache, then `key = value  source` per line."""
  config = resolve_config(task, mixer, preset, overrides)
  run_dir = Path(run_dir) if run_dir else default_run_dir(config, results_dir)
  cache = data_cache_dir(config, data_dir or default_data_dir())
  missing = missing_data(config, data_dir)
  if (cache / "meta.json").exists():
    data = "prepared"
  elif missing is None:
    data = "missing: the run generates it first (seeded, no download)"
  else:
    data = "missing. " + missing
  rows = sources(task, mixer, preset, overrides)
  width = max(len(f"{k} = {v!r}") for k, v, _ in rows)
  lines = [f"{task} x {config.model.mixer} (preset {preset}): dry run, nothing is trained or "
           "written.",
           f"run folder: {run_dir} ({_run_folder_state(run_dir)})",
           f"data: {cache} ({data})",
           f"config ({sum(s != DEFAULT for _, _, s in rows)} of {len(rows)} values set by the "
           "preset or the command line):"]
  lines += [f"  {f'{k} = {v!r}':<{width}}  {s}" for k, v, s in rows]
  return "\n".join(lines)
