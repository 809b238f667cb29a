"""Task configs by name, `--config.a.b=value` overrides on their locked ConfigDicts, and the
folders a resolved config maps to (its run dir, its generated-data cache)."""
from __future__ import annotations

import ast
import hashlib
import importlib
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import ml_collections

from lra import errors
from lra.configs import common
from lra.runs import run_identity
from lra.tasks import TASKS, prepared, unknown_task
from lra.tasks.contract.cache import PreparedData


def load_config(task: str, preset: str = "paper",
                mixer: str = "latte") -> ml_collections.ConfigDict:
  """`configs/<task>.py:get_config("PRESET,mixer=MIXER")`, or an error naming what exists."""
  if task not in TASKS:
    raise unknown_task(task)
  return importlib.import_module(f"lra.configs.{task}").get_config(f"{preset},mixer={mixer}")


def resolve_config(task: str, mixer: str, preset: str = "paper",
                   overrides: Sequence[str] = ()) -> ml_collections.ConfigDict:
  """The preset's config for this mixer, with the overrides applied.

  MIXER is a registered name, or one from outside the suite (`path/file.py:Class`,
  `module:Class`, an `lra.mixers` entry point; see lra.models.mixers). `--config.model.mixer=NAME`
  among the overrides picks the mixer (and its preset settings) the same way. The overrides of
  `objective` and `spt.*` come first: they choose a self-pretraining phase, whose budget
  (configs.common.spt_phase) the other overrides may then change.

  Raises:
    errors.BadValue: an override of a setting this run's phase does not read (`spt.*` on a run
      from scratch, the classifier's head on a pretraining: run_identity.PHASE_READS), or of the
      start a fine-tune records; besides apply_overrides' own.
  """
  for item in overrides:
    if _key(item) == "model.mixer":
      mixer = item.partition("=")[2].strip()
  overrides = [o for o in overrides if _key(o) != "model.mixer"]
  # A preset may depend on a registered mixer's name; an outside mixer gets the common preset.
  config = load_config(task, preset, mixer if re.fullmatch(r"[\w.-]+", mixer) else "custom")
  use_mixer(config, mixer)
  first = [o for o in overrides if _key(o) == "objective" or _key(o).startswith("spt.")]
  apply_overrides(config, first)
  for item in overrides:  # the phase is chosen: what it never reads is a slip, said at once
    problem = run_identity.unread_override(run_identity.phase(config), item)
    if problem:
      raise errors.BadValue(problem)
  common.spt_phase(config)
  return apply_overrides(config, [o for o in overrides if o not in first])


def _key(override: str) -> str:
  return override.partition("=")[0].strip()


def phase_overrides(config: Mapping[str, Any]) -> list[str]:
  """The overrides that put a preset in the self-pretraining phase of `config` (a stored one):
  `objective=denoise` for a pretraining run, `spt.init_from=RUN` for a fine-tune, none else."""
  found = []
  if config.get("objective", "classify") != "classify":
    found.append(f"objective={config['objective']}")
  if (config.get("spt") or {}).get("init_from"):
    found.append(f"spt.init_from={config['spt']['init_from']}")
  return found


def use_mixer(config: ml_collections.ConfigDict, mixer: str) -> None:
  """Sets `model.mixer` to MIXER: a registered name, or one from outside the suite.

  A registered mixer's block is in every config. An outside one brings its block,
  `mixers.<Class>` from its fields' defaults, and `mixer_source` (spec, sha256 of its file), so
  config.json says what ran and a changed file is a different config.
  """
  if mixer in config.mixers:
    config.model.mixer = mixer
    return
  from lra.models.mixers import default_settings, find_mixer  # JAX only for outside mixers
  found = find_mixer(mixer)
  with config.unlocked():
    config.mixers[found.key] = default_settings(found.cls)
    config.mixer_source = found.source
  config.model.mixer = found.key


def mixer_label(config: ml_collections.ConfigDict) -> str:
  """How run folders and tables name the mixer: its name, and for a mixer from outside the suite
  `<Class>@<first 8 hex of its file's sha256>`, so each version of the file is its own row."""
  source = config.get("mixer_source")
  label = config.model.mixer + (f"@{source.sha256[:8]}" if source else "")
  return re.sub(r"[^A-Za-z0-9._@-]", "-", label)


def reference_config(config: Mapping[str, Any]) -> ml_collections.ConfigDict:
  """Today's preset config for a config's task, mixer and preset: what its identity (its
  departures from the preset) is measured against."""
  source = config.get("mixer_source")
  mixer = source["spec"] if source else config["model"]["mixer"]
  return resolve_config(config["task"], mixer, config["preset"], phase_overrides(config))


def preset_reference(config: Mapping[str, Any]) -> dict[str, Any] | None:
  """`reference_config` as a plain dict, or None when that task, mixer or preset no longer
  exists (or an outside mixer cannot be imported here)."""
  try:
    return reference_config(config).to_dict()
  except (KeyError, ValueError, TypeError, OSError, ImportError):
    return None


def run_key(config: Mapping[str, Any], reference: Mapping[str, Any] | None = None) -> str:
  """A run's key against today's preset (run_identity.config_fingerprint): the one function the
  tables, `lra status`, the dry run's costs, a fine-tune's start and resume compute it with. A
  fine-tune's start is read from its config's record (a stored config from before the record:
  lra.runs.start.as_recorded first). `reference`: preset_reference(config), where the caller
  has it already."""
  return run_identity.config_fingerprint(
      config, preset_reference(config) if reference is None else reference)


def default_run_dir(config: ml_collections.ConfigDict, results_dir: Path,
                    reference: Mapping[str, Any] | None = None) -> Path:
  """results/runs/<task>/<mixer label>/<preset>[+<departures>]_seed<N> (run_identity.run_name);
  `reference`: today's preset config (reference_config) where the caller has it already. A
  fine-tune's name also says how the start its config records departs (lra.runs.start)."""
  if reference is None:
    reference = reference_config(config.to_dict()).to_dict()
  name = run_identity.run_name(config.to_dict(), reference)
  return Path(results_dir) / "runs" / config.task / mixer_label(config) / name


def default_data_dir() -> Path:
  """Where prepared data lives unless --data-dir says: $LRA_DATA_DIR, else ~/.cache/lra."""
  return Path(os.environ.get("LRA_DATA_DIR", "~/.cache/lra")).expanduser()


def missing_data(config: ml_collections.ConfigDict, data_dir: Path | None) -> str | None:
  """None when a run of `config` has its data (a prepared cache, or data it generates itself);
  else the task's own words on how to make it, on one line."""
  cache = data_cache_dir(config, data_dir or default_data_dir())
  if (cache / "meta.json").exists() or config.data.generate:
    return None
  return TASKS[config.task].data_hint.replace("\n", " ")


def data_cache_dir(config: ml_collections.ConfigDict, data_dir: Path) -> Path:
  """The prepared cache a config reads: `<data_dir>/<cache_name>`.

  Generated data (smoke/demo presets, synthetic) gets a folder per generator recipe,
  `<cache_name>-<hash>`, so overriding `data.generator.*` makes new data instead of silently
  reusing a cache made with other settings.
  """
  name = config.data.cache_name or config.task
  if config.data.generate:
    recipe = json.dumps(config.data.generator.to_dict(), sort_keys=True).encode()
    name += "-" + hashlib.sha256(recipe).hexdigest()[:8]
  return Path(data_dir) / name


def unused_overrides(mixers: Sequence[str], overrides: Sequence[str]) -> list[str]:
  """The overrides of another mixer's settings (`mixers.softmax.query_chunk=64` on a Latte run):
  valid keys, so the locked config takes them, but no run of `mixers` reads them."""
  unused = []
  for item in overrides:
    parts = item.partition("=")[0].strip().split(".")
    if len(parts) > 2 and parts[0] == "mixers" and parts[1] not in mixers:
      unused.append(item)
  return unused


def _parse_value(text: str, current):
  if isinstance(current, bool):
    if text.lower() in ("true", "1", "yes"):
      return True
    if text.lower() in ("false", "0", "no"):
      return False
    raise ValueError(f"expected true/false, got {text!r}")
  if isinstance(current, (int, float)):
    kind = "an integer" if isinstance(current, int) else "a number"
    try:
      number = float(text)
    except ValueError:
      raise ValueError(f"expected {kind}, found {text!r}") from None
    if isinstance(current, float):
      return number
    if not number.is_integer():
      raise ValueError(f"expected {kind}, found {text!r}")
    return int(number)
  if isinstance(current, str):
    return text
  return ast.literal_eval(text)


def apply_overrides(config: ml_collections.ConfigDict,
                    overrides: Sequence[str]) -> ml_collections.ConfigDict:
  """Applies `a.b=value` strings (the `--config.` prefix already removed).

  Raises:
    errors.UnknownName (a KeyError) for a key the config does not have (configs are locked: no
    silent typos), errors.BadValue (a ValueError) for a value of the wrong type.
  """
  for item in overrides:
    key, sep, text = item.partition("=")
    if not sep:
      raise errors.BadValue(f"--config.{item}: no value; expected --config.{item}=VALUE (or "
                            f"--config.{item} VALUE)")
    node, parts = config, key.split(".")
    for i, part in enumerate(parts):
      if part not in node:
        valid = ", ".join(sorted(node.keys()))
        raise errors.UnknownName(f"--config.{key}: '{'.'.join(parts[:i + 1])}' is not a config "
                                 f"key. Valid keys here: {valid}")
      if i < len(parts) - 1:
        node = node[part]
    current = node[parts[-1]]
    if isinstance(current, ml_collections.ConfigDict):
      raise errors.UnknownName(f"--config.{key} is a block; set one of its keys: "
                               f"{', '.join(sorted(current.keys()))}")
    try:
      value = _parse_value(text, current)
      node[parts[-1]] = value
    except (ValueError, SyntaxError, TypeError) as e:  # TypeError: the locked config's type check
      raise errors.BadValue(f"--config.{key}={text}: {e} (current value {current!r})") from None
  return config


def load_data(config: ml_collections.ConfigDict, data_dir: Path,
              log=lambda msg: print(msg, file=sys.stderr)) -> PreparedData:
  """The prepared cache this config names, checked; the small presets that make their own data
  (data.generate) make it again when it is missing or damaged (lra.tasks.prepared)."""
  generator = config.data.generator.to_dict() if config.data.generate else None
  return prepared(config.task, data_cache_dir(config, data_dir), generator, log)
