"""A fine-tune's start, as its config records it (`spt.start`): the pretraining's key and how that
departs from its preset, the step of the checkpoint loaded, and whether the pretraining was
complete then. The fine-tune's name, its key in the tables, its resume and its dry run read the
record, never the pretraining's folder as it is today; `lra run --init-from` writes it once.

A config written before the record (every fine-tune committed before it) reads as the code read it
then (run identity is versioned): its final.json's `pretrained` and the pretraining's folder while
that is there (as_recorded).
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ml_collections

from lra import errors
from lra.runs import run_identity
from lra.runs.config_loading import mixer_label, preset_reference, reference_config, run_key

_CARRIED = re.compile(r"^(\d+)\.msgpack$")  # lra.runs.best_params' files, read without JAX


def of_pretraining(pretraining: Mapping[str, Any], *, step: int = 0,
                   complete: bool = True) -> dict[str, Any]:
  """The record of a start from this pretraining config (as trained)."""
  reference = preset_reference(pretraining)
  return {"config_id": run_key(pretraining, reference), "step": int(step or 0),
          "complete": bool(complete),
          "departures": [] if reference is None else run_identity.departures(pretraining,
                                                                             reference)}


def newest_step(folder: Path) -> int | None:
  """The newest step of a checkpoints folder (Orbax names a complete one by its bare step)."""
  return max((int(p.name) for p in Path(folder).glob("*") if p.name.isdigit() and p.is_dir()),
             default=None)


def best_step(run_dir: Path) -> int | None:
  """The step of a run folder's newest best checkpoint (Orbax's, or the best parameters `lra
  unpack` carried), None without one: what a fine-tune from it loads."""
  found = [int(m.group(1)) for p in (Path(run_dir) / "checkpoints" / "best_params").glob("*")
           if (m := _CARRIED.match(p.name))]
  orbax = newest_step(Path(run_dir) / "checkpoints" / "best")
  return max([*found, *([] if orbax is None else [orbax])], default=None)


def read_folder(run_dir: Path) -> dict[str, Any] | None:
  """The record of a start from the pretraining run in `run_dir` as it stands (None: no run
  there): the step its best checkpoint holds (final.json's best_step when checkpoints/ is not
  here), complete when its final.json says so."""
  run_dir = Path(run_dir)
  if not (run_dir / "config.json").is_file() or not (run_dir / "final.json").is_file():
    return None
  final = json.loads((run_dir / "final.json").read_text())
  step = best_step(run_dir)
  return of_pretraining(run_identity.read_config(run_dir / "config.json"),
                        step=final.get("best_step") if step is None else step,
                        complete=final.get("status") == "complete")


def write(config: ml_collections.ConfigDict, start: Mapping[str, Any]) -> None:
  """Sets `config`'s spt.start to the record `start`."""
  for key, value in start.items():
    config.spt.start[key] = list(value) if key == "departures" else value


def as_recorded(config: dict[str, Any], final: Mapping[str, Any] | None,
                base: Path | str = ".") -> dict[str, Any]:
  """A stored config with its start: its own record, or for a fine-tune written before the
  record, the one the code read then: the pretraining's key computed by this code from its
  folder's config.json (relative to `base`) while that is there (seeds recorded by different
  versions stay one experiment), else the key final.json recorded; the name's departures from
  that folder; never unfinished (the code did not tell those apart). A copy where it adds."""
  if run_identity.phase(config) != "spt" or run_identity.start_of(config):
    return config
  loaded = (final or {}).get("pretrained") or {}
  folder = Path(base) / str(loaded.get("run_dir") or config["spt"]["init_from"])
  try:
    pretraining = run_identity.read_config(folder / "config.json")
  except (OSError, ValueError):
    pretraining = None
  if pretraining is None and not loaded.get("config_id"):
    return config  # nothing recorded, nothing there: no start to tell
  start = (of_pretraining(pretraining) if pretraining is not None else
           {"config_id": loaded["config_id"], "departures": []})
  return {**config, "spt": {**config["spt"], "start": {**start, "step": loaded.get("step", 0),
                                                        "complete": True}}}


def read_run(run_dir: Path, base: Path | str = ".") -> tuple[dict[str, Any], dict[str, Any]]:
  """(config as trained and recorded, final.json or {}) of a run folder."""
  run_dir = Path(run_dir)
  final_path = run_dir / "final.json"
  final = json.loads(final_path.read_text()) if final_path.is_file() else {}
  return as_recorded(run_identity.read_config(run_dir / "config.json"), final, base), final


def resolve(config: ml_collections.ConfigDict, results_dir: Path | None,
            run_dir: Path | None = None) -> Path | None:
  """Records a fine-tune's start in `config` (no-op for another run, or one recorded already);
  returns the folder to use where the start came from the fine-tune's own folder.

  In order: a `run_dir` holding this fine-tune, begun, continues its own start; else the
  pretraining folder --init-from names gives it as it stands (so once that pretraining finishes,
  the same command makes the complete-start fine-tune); else, with that folder gone, the
  fine-tune's own folder under `results_dir` (None: not looked for) that started from it (the
  complete start first, then the latest) keeps its start and folder. With none of those the
  record stays empty: a dry run names the fine-tune as from the pretraining its settings make,
  and a run is refused (require).
  """
  if run_identity.phase(config) != "spt" or run_identity.start_of(config):
    return None
  init_dir = Path(config.spt.init_from)
  if run_dir is not None and begun(Path(run_dir)):
    own = _own_start(config, Path(run_dir), init_dir)
    if own is not None:
      write(config, own)
      return None
  start = read_folder(init_dir)
  if start is not None:
    write(config, start)
    return None
  if run_dir is not None or results_dir is None:
    return None
  found = []
  for folder in (Path(results_dir) / "runs" / config.task / mixer_label(config)).glob("*"):
    own = _own_start(config, folder, init_dir)
    if own is not None:
      found.append((own.get("complete", True), own.get("step", 0), folder, own))
  if not found:
    return None
  *_, folder, own = max(found, key=lambda item: item[:2])
  write(config, own)
  return folder


def _own_start(config: ml_collections.ConfigDict, folder: Path,
               init_dir: Path) -> dict[str, Any] | None:
  """The start `folder`'s fine-tune records, when it is this command's run from `init_dir`."""
  if not (folder / "config.json").is_file():
    return None
  try:
    stored, _ = read_run(folder)
  except (OSError, ValueError):
    return None
  start = run_identity.start_of(stored)
  said = str(stored.get("spt", {}).get("init_from", ""))
  if start is None or not (said == str(init_dir) or Path(said).resolve() == init_dir.resolve()):
    return None
  mine = ml_collections.ConfigDict(config.to_dict())
  write(mine, start)
  plain = mine.to_dict()
  same = not run_identity.same_run(stored, plain, reference_config(plain).to_dict())
  return start if same else None


def has_checkpoint(run_dir: Path) -> bool:
  """Whether `run_dir` holds a training checkpoint (a step's folder) to resume from."""
  return newest_step(Path(run_dir) / "checkpoints") is not None


def begun(run_dir: Path) -> bool:
  """Whether the fine-tune in `run_dir` is past loading its start: a checkpoint to resume, or
  complete. Its start is then its own record, wherever the pretraining has gone since."""
  final = Path(run_dir) / "final.json"
  return has_checkpoint(Path(run_dir)) or (
      final.is_file() and json.loads(final.read_text()).get("status") == "complete")


def require(config: ml_collections.ConfigDict) -> None:
  """Refuses a fine-tune whose start could not be read: its pretraining folder is not there, and
  no fine-tune of it is either (one line, with the fix)."""
  if run_identity.phase(config) == "spt" and not run_identity.start_of(config):
    raise errors.NotFound(
        f"--init-from {config.spt.init_from}: no pretraining run there (no config.json and "
        "final.json), and no fine-tune from it under the results folder to resume; pass the "
        "folder `lra pretrain` printed, or --run-dir of the fine-tune")
