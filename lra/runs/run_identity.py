"""What identifies a run: its preset, the settings where it departs from that preset's defaults
(today's), and its seed. From those come the run folder's default name and the fingerprint that
groups seeds of one experiment in the tables.

Identity is relative to the preset, not a hash of the whole config, so adding a config key with a
default (which reproduces the old behaviour) leaves every existing run resumable and in the tables:
a stored config that lacks a key simply does not depart from the preset there. A key added with a
default that changes what the old configs computed is listed in ADDED_KEYS with the value they
ran, and every reader of a stored config reads it through `as_trained`, so names, fingerprints,
tables, `lra eval` and resume commands all see what the run computed. Settings of mixers a run
does not use are not part of its identity either, nor are the logging settings (`log.*`).

Plain dicts in, plain values out (no JAX, no ml_collections), so `lra table`, `lra sweep` and the
notebooks share these rules with `lra run`.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

SEED_KEY = "train.seed"
# Settings that say where the curves also go (TensorBoard, W&B), not what the run computes, and
# where a fine-tune's pretraining run lies on this machine (the run's name says `spt`; its
# final.json names the pretraining run by its identity).
NOT_IDENTITY = ("log.", "spt.init_from", "spt.allow_partial",
                # A phase's budget becomes its train.num_steps and warm-up (configs.common.
                # spt_phase): named there once, not twice; a run from scratch reads none of them.
                "spt.pretrain_steps", "spt.pretrain_warmup_steps", "spt.finetune_steps")
# Keys added with a default that is not what configs written before them computed: the value those
# configs ran, read wherever a stored config has the key's block but not the key (or a function of
# the stored config giving it, where that depended on other settings).
ADDED_KEYS = {
    # Reformer attended to every key of its chunk window until the same-bucket rule came
    # (2026-11-27); the paper's rule is today's default, the LRA code's the `lra` presets'.
    "mixers.reformer.attend_across_buckets": True,
    # S5 in the common block was the bare SSM (the class default) until S5's output layer became
    # the preset's (2026-11-28): a config without the key trained no gate after the scans.
    "mixers.s5.activation": "none",
    # Performer's float32 kernel output went into its output projection uncast until the cast
    # back to the compute dtype came (2026-11-28): a change only where that dtype was bfloat16
    # (and the kernel the float32 random features', softmax).
    "mixers.performer.output_dtype": lambda config: (
        "float32" if config.get("model", {}).get("dtype") == "bfloat16"
        and config.get("mixers", {}).get("performer", {}).get("kernel", "softmax") == "softmax"
        else "input"),
}
_MAX_NAME = 80  # longer override suffixes become a hash, so paths stay usable
_UNSAFE = re.compile(r"[^A-Za-z0-9._=+,-]")


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
  """{'train': {'seed': 0}} -> {'train.seed': 0}; empty blocks vanish."""
  flat: dict[str, Any] = {}
  for key, value in config.items():
    if isinstance(value, Mapping):
      flat.update(flatten(value, f"{prefix}{key}."))
    else:
      flat[prefix + key] = value
  return flat


def as_trained(config: Mapping[str, Any]) -> dict[str, Any]:
  """A stored config (a run's config.json) as the run computed it: each ADDED_KEYS key its
  block lacks set to the value the code ran before the key existed. A copy; blocks the config
  does not have stay absent."""
  config = json.loads(json.dumps(config))
  for key, value in ADDED_KEYS.items():
    *path, leaf = key.split(".")
    block = config
    for part in path:
      block = block.get(part) if isinstance(block, dict) else None
    if isinstance(block, dict) and leaf not in block:
      block[leaf] = value(config) if callable(value) else value
  return config


def read_config(path) -> dict[str, Any]:
  """A run's config.json, read `as_trained`: the one way a stored config is read back."""
  with open(path) as f:
    return as_trained(json.load(f))


def _own_settings(config: Mapping[str, Any]) -> dict[str, Any]:
  """The flat config (as trained) without the seed, the logging settings and the blocks of
  mixers this run does not use."""
  mixer = config.get("model", {}).get("mixer")
  flat = flatten(as_trained(config))
  flat.pop(SEED_KEY, None)
  return {k: v for k, v in flat.items() if not k.startswith(NOT_IDENTITY)
          and (not k.startswith("mixers.") or k.startswith(f"mixers.{mixer}."))}


def _text(value: Any) -> str:
  return value if isinstance(value, str) else (
      json.dumps(value) if isinstance(value, (list, dict)) else str(value))


def departures(config: Mapping[str, Any], reference: Mapping[str, Any]) -> list[str]:
  """Sorted "key=value" settings where `config` differs from `reference`, its preset's config.

  Keys the config lacks (added since it was written) and keys the reference lacks (removed since)
  are not departures; the seed is left out (it has its own place in the run name).
  """
  ours, theirs = _own_settings(config), _own_settings(reference)
  return sorted(f"{k}={_text(ours[k])}" for k in ours.keys() & theirs.keys()
                if ours[k] != theirs[k])


def config_fingerprint(config: Mapping[str, Any], reference: Mapping[str, Any] | None,
                       start: str | None = None) -> str:
  """A short hash of (preset, departures, SPT phase, `start`): runs with equal fingerprints are
  seeds of one experiment, and only those are averaged together. Without a reference (a preset
  that no longer exists) every setting counts. A self-pretraining phase is another experiment
  than its preset's run from scratch; runs from scratch keep the ids they had before SPT.

  `start`: a fine-tune's pretraining run's fingerprint (final.json's pretrained.config_id), so
  that fine-tunes from differently pretrained encoders are never averaged as one experiment.
  """
  settings = (departures(config, reference) if reference is not None else
              sorted(f"{k}={_text(v)}" for k, v in _own_settings(config).items()))
  key = json.dumps([config.get("preset"), settings, *filter(None, [phase(config), start])])
  return hashlib.sha256(key.encode()).hexdigest()[:8]


def phase(config: Mapping[str, Any]) -> str:
  """"pretrain" (self-pretraining: objective=denoise), "spt" (a fine-tune from one: spt.init_from
  set) or "" (a run from scratch; every config written before SPT)."""
  if config.get("objective", "classify") == "denoise":
    return "pretrain"
  return "spt" if (config.get("spt") or {}).get("init_from") else ""


_PHASES = {"": "a run from scratch", "pretrain": "a self-pretraining run (lra pretrain)",
           "spt": "a fine-tune (--init-from)"}


def run_name(config: Mapping[str, Any], reference: Mapping[str, Any],
             start: Sequence[str] = ()) -> str:
  """`<preset>[+<phase>,<departures>]_seed<N>`: e.g. `demo_seed0`,
  `demo+mixers.latte.vapor=True_seed0`, `squares+pretrain_seed0` (lra pretrain), `squares+spt_seed0`
  (its fine-tune), `squares+spt,pretrain.train.num_steps=24000_seed0` (a fine-tune from a longer
  pretraining: `start`, start_departures).

  Two commands that resolve to one config share a folder, and a different config never lands in
  another's folder (a suffix over 80 characters is replaced by its hash, the phase kept).
  """
  suffix = ",".join([*departures(config, reference), *start])
  if len(suffix) > _MAX_NAME:
    suffix = "cfg-" + hashlib.sha256(suffix.encode()).hexdigest()[:8]
  suffix = ",".join(p for p in (phase(config), _UNSAFE.sub("-", suffix)) if p)
  seed = flatten(config).get(SEED_KEY, 0)
  return f"{config['preset']}{'+' + suffix if suffix else ''}_seed{seed}"


def start_departures(config: Mapping[str, Any], reference: Mapping[str, Any],
                     pretraining: Mapping[str, Any], pretraining_reference: Mapping[str, Any]
                     ) -> list[str]:
  """How the pretraining a fine-tune starts from departs from its own preset beyond the
  fine-tune's own departures (its encoder's are the fine-tune's: init_from.check), as
  `pretrain.KEY=VALUE` items: a fine-tune from a longer or otherwise other pretraining is named
  apart from the preset's (the phase's budget keys are not identity; its train.num_steps is)."""
  ours = set(departures(config, reference))
  return [f"pretrain.{item}" for item in departures(pretraining, pretraining_reference)
          if item not in ours]


def same_run(stored: Mapping[str, Any], config: Mapping[str, Any],
             reference: Mapping[str, Any]) -> list[str]:
  """Why a run dir's stored config is not the run `config` describes ([] when it is).

  Both are compared through their departures from `reference` (today's preset), plus the seed,
  preset, task and mixer.
  """
  reasons = []
  if phase(stored) != phase(config):  # a pretraining, a fine-tune or a run from scratch
    reasons.append(f"it is {_PHASES[phase(stored)]}, this command {_PHASES[phase(config)]}")
  for key in ("task", "preset", "model.mixer", SEED_KEY):
    old, new = flatten(stored).get(key), flatten(config).get(key)
    if old != new:
      reasons.append(f"it has {key}={old}, this command {key}={new}")
  old, new = set(departures(stored, reference)), set(departures(config, reference))
  reasons += [f"it has {item}" for item in sorted(old - new)]
  reasons += [f"this command has {item}" for item in sorted(new - old)]
  return reasons


def arrays_fingerprint(arrays: Mapping[str, Any] | None) -> str | None:
  """One sha256 over a prepared cache's per-array sha256s (meta.json's `arrays`): the same data
  made on any machine gives the same value; None for a cache that records no hashes."""
  hashes = {name: entry.get("sha256") for name, entry in (arrays or {}).items()
            if isinstance(entry, Mapping)}
  if not hashes or None in hashes.values():
    return None
  return "sha256:" + hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()


def data_changes(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
  """How the data a run was trained on (final.json's `data`) differs from what it would resume
  on ([] when it does not, or when the record is too old to tell). Compared: the prepared
  arrays' fingerprint, the source files' sha256s (not a listing's sizes and times, which change
  when the same images are made again), the splits and the prepare options."""
  reasons = []
  old, new = recorded.get("arrays_sha256"), current.get("arrays_sha256")
  if old and new and old != new:
    reasons.append(f"prepared arrays {old[7:19]}..., now {new[7:19]}...")
  old_files = (recorded.get("source") or {}).get("checksums") or {}
  new_files = (current.get("source") or {}).get("checksums") or {}
  for name in sorted(set(old_files) & set(new_files)):
    a, b = str(old_files[name]), str(new_files[name])
    if a.startswith("sha256:") and b.startswith("sha256:") and a != b:
      reasons.append(f"{name} {a[7:19]}..., now {b[7:19]}...")
  for key in ("splits", "options"):  # per entry in both: a prepare option added later is not
    old, new = recorded.get(key) or {}, current.get(key) or {}  # a change of data
    reasons += [f"{key}.{name} {old[name]}, now {new[name]}" for name in sorted(set(old) & set(new))
                if old[name] != new[name]]
  return reasons
