"""What identifies a run: the part of its config that can change its results, a fingerprint of
that part, and the run folder's default name (preset, the settings that differ from it, seed).

Plain dicts in, plain values out (no JAX, no ml_collections), so `lra table`, `lra sweep` and the
notebooks share these rules with `lra run` without importing the model code.
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Mapping

SEED_KEY = "train.seed"
_MAX_NAME = 80  # longer override suffixes become a hash, so paths stay usable
_UNSAFE = re.compile(r"[^A-Za-z0-9._=+,-]")


def comparable_config(config: Mapping[str, Any]) -> dict[str, Any]:
  """The config without the settings blocks of mixers this run does not use.

  Every config carries one block per registered mixer; leaving the others out means that
  registering a new mixer (or retuning another one's defaults) leaves existing runs unchanged.
  """
  config = json.loads(json.dumps(config))
  mixer = config.get("model", {}).get("mixer")
  mixers = config.get("mixers")
  if isinstance(mixers, dict) and mixer in mixers:
    config["mixers"] = {mixer: mixers[mixer]}
  return config


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
  """{'train': {'seed': 0}} -> {'train.seed': 0}; empty blocks vanish."""
  flat: dict[str, Any] = {}
  for key, value in config.items():
    if isinstance(value, Mapping):
      flat.update(flatten(value, f"{prefix}{key}."))
    else:
      flat[prefix + key] = value
  return flat


def config_fingerprint(config: Mapping[str, Any]) -> str:
  """A short hash of the comparable config without its seed: runs with equal fingerprints are
  seeds of one experiment, and only those are averaged together."""
  flat = flatten(comparable_config(config))
  flat.pop(SEED_KEY, None)
  return hashlib.sha256(json.dumps(flat, sort_keys=True).encode()).hexdigest()[:8]


def _text(value: Any) -> str:
  return value if isinstance(value, str) else (
      json.dumps(value) if isinstance(value, (list, dict)) else str(value))


def config_diff(config: Mapping[str, Any], reference: Mapping[str, Any]) -> dict[str, list[str]]:
  """How `config` departs from `reference` (its preset's config), comparable parts only.

  Returns:
    {"changed": ["key=value", ...] (values of config), "missing": [keys the reference has and
    config lacks], "unknown": [keys config has and the reference lacks]}, each sorted; the seed
    is left out (it has its own place in the run name).
  """
  ours, theirs = flatten(comparable_config(config)), flatten(comparable_config(reference))
  for flat in (ours, theirs):
    flat.pop(SEED_KEY, None)
  return {
      "changed": sorted(f"{k}={_text(ours[k])}" for k in ours.keys() & theirs.keys()
                        if ours[k] != theirs[k]),
      "missing": sorted(theirs.keys() - ours.keys()),
      "unknown": sorted(ours.keys() - theirs.keys()),
  }


def run_name(config: Mapping[str, Any], reference: Mapping[str, Any]) -> str:
  """`<preset>[+<overrides>]_seed<N>`: e.g. `demo_seed0`, `demo+mixers.latte.vapor=True_seed0`.

  The overrides are the settings where `config` differs from `reference` (its preset's own
  config), so two commands that resolve to one config share a folder, and a different config
  never lands in another's folder (a suffix over 80 characters is replaced by its hash).
  """
  changed = config_diff(config, reference)["changed"]
  suffix = ",".join(changed)
  if len(suffix) > _MAX_NAME:
    suffix = "cfg-" + hashlib.sha256(suffix.encode()).hexdigest()[:8]
  suffix = _UNSAFE.sub("-", suffix)
  seed = flatten(config).get(SEED_KEY, 0)
  return f"{config['preset']}{'+' + suffix if suffix else ''}_seed{seed}"
