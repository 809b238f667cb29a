"""What identifies a run: its preset, the settings where it departs from that preset's defaults
(today's) among those its phase reads, its seed, and for a fine-tune the start its config
records (spt.start: lra.runs.start). From those come the run folder's default name and the key
that groups seeds of one experiment in the tables (config_fingerprint).

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
# where a fine-tune's pretraining run lies on this machine (its identity is the start its config
# records, spt.start, which the key and name read apart: start_key, start_items).
NOT_IDENTITY = ("log.", "spt.init_from", "spt.allow_partial", "spt.start.",
                # A phase's budget becomes its train.num_steps and warm-up (configs.common.
                # spt_phase): named there once, not twice; a run from scratch reads none of them.
                "spt.pretrain_steps", "spt.pretrain_warmup_steps", "spt.finetune_steps")
# The settings only some phases read ("": from scratch, "pretrain", "spt": a fine-tune; every
# other key is read by all three): a run's identity holds those its phase reads, and a --config
# override of one it does not read is refused (unread_override). A fine-tune reads the denoising
# settings in the sense that it records its pretraining's (lra.training.init_from.PAIRED_KEYS).
PHASE_READS = {
    "model.head": ("", "spt"),  # the classifier's head; a pretraining's Denoiser has its own
    "spt.mask_ratio": ("pretrain", "spt"), "spt.loss": ("pretrain", "spt"),
    "spt.pixel_levels": ("pretrain", "spt"),
    "spt.pretrain_steps": ("pretrain",), "spt.pretrain_warmup_steps": ("pretrain",),
    "spt.finetune_steps": ("spt",), "spt.init_from": ("spt",), "spt.allow_partial": ("spt",),
}
# What the fine-tune's start record holds: written by `lra run --init-from`, never a setting.
START = "spt.start."
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
    # S5's own block dropped elementwise, and after the embedding, until its masks became S5's
    # (2026-12-04, issue 78); the published presets now set "s5".
    "model.s5_dropout": "elementwise",
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


def reads(run_phase: str, key: str) -> bool:
  """Whether a run of this phase reads `key` (PHASE_READS; the start record only a fine-tune)."""
  if key.startswith(START):
    return run_phase == "spt"
  return run_phase in PHASE_READS.get(key, (run_phase,))


def unread_override(run_phase: str, item: str) -> str | None:
  """Why `--config.KEY=VALUE` does not belong on a run of this phase (one line, naming the phase
  that reads it), or None when the run reads it."""
  key = item.partition("=")[0].strip()
  if key.startswith(START):
    return (f"--config.{item}: the start a fine-tune records (from its --init-from folder), not "
            "a setting; drop it")
  if reads(run_phase, key):
    return None
  readers = " and ".join(_PHASES[p] for p in PHASE_READS[key])
  return (f"--config.{item}: {_PHASES[run_phase]} does not read {key}; {readers} "
          f"{'does' if len(PHASE_READS[key]) == 1 else 'do'}. Drop it, or pass it to that command")


def for_phase(run_phase: str, overrides: Sequence[str]) -> list[str]:
  """The overrides a run of this phase reads (lra sweep --spt gives each phase its own)."""
  return [o for o in overrides if reads(run_phase, o.partition("=")[0].strip())]


def _own_settings(config: Mapping[str, Any]) -> dict[str, Any]:
  """The flat config (as trained) without the seed, the logging settings, the blocks of mixers
  this run does not use and the settings its phase does not read."""
  mixer, run_phase = config.get("model", {}).get("mixer"), phase(config)
  flat = flatten(as_trained(config))
  flat.pop(SEED_KEY, None)
  return {k: v for k, v in flat.items() if not k.startswith(NOT_IDENTITY)
          and (not k.startswith("mixers.") or k.startswith(f"mixers.{mixer}."))
          and reads(run_phase, k)}


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


def config_fingerprint(config: Mapping[str, Any], reference: Mapping[str, Any] | None) -> str:
  """A short hash of (preset, departures, SPT phase, start): runs with equal fingerprints are
  seeds of one experiment, and only those are averaged together. Without a reference (a preset
  that no longer exists) every setting counts. A self-pretraining phase is another experiment
  than its preset's run from scratch; runs from scratch keep the ids they had before SPT.

  A fine-tune's start (start_key: its pretraining's fingerprint, and the step where that was
  unfinished) is part of it, so fine-tunes from differently pretrained encoders, or from a
  pretraining stopped early, are never averaged as one experiment. lra.runs.config_loading.
  run_key is this against today's preset: the one key every reader uses.
  """
  settings = (departures(config, reference) if reference is not None else
              sorted(f"{k}={_text(v)}" for k, v in _own_settings(config).items()))
  key = json.dumps([config.get("preset"), settings,
                    *filter(None, [phase(config), start_key(config)])])
  return hashlib.sha256(key.encode()).hexdigest()[:8]


def start_of(config: Mapping[str, Any]) -> dict[str, Any] | None:
  """A fine-tune's start as its config records it (spt.start: config_id, departures, step,
  complete), or None: another phase, or a config written before the record (lra.runs.start.
  as_recorded gives those theirs)."""
  start = (config.get("spt") or {}).get("start") or {}
  return dict(start) if phase(config) == "spt" and start.get("config_id") else None


def start_key(config: Mapping[str, Any]) -> str | None:
  """What of a fine-tune's start is its identity: the pretraining's fingerprint, and the step it
  loaded when that pretraining was unfinished (a partial start is its own experiment)."""
  start = start_of(config)
  if start is None:
    return None
  return start["config_id"] + ("" if start.get("complete", True) else f"@{start['step']}")


def start_items(config: Mapping[str, Any], reference: Mapping[str, Any]) -> list[str]:
  """How a fine-tune's start departs from its preset's, for its name: the pretraining's own
  departures beyond the fine-tune's (its encoder's are the fine-tune's: init_from.check), as
  `pretrain.KEY=VALUE` (the phase's budget keys are not identity; its train.num_steps is)."""
  start = start_of(config)
  if start is None:
    return []
  ours = set(departures(config, reference))
  return [f"pretrain.{item}" for item in start.get("departures", []) if item not in ours]


def _partial(config: Mapping[str, Any]) -> str:
  """`pretrain.partial=STEP` for a fine-tune from an unfinished pretraining, else ""."""
  start = start_of(config)
  return "" if start is None or start.get("complete", True) else f"pretrain.partial={start['step']}"


def describe_start(config: Mapping[str, Any]) -> str:
  """"pretraining 1a2b3c4d" (+ ", unfinished, at step 884"), or "no recorded start"."""
  start = start_of(config)
  if start is None:
    return "no recorded start"
  return f"pretraining {start['config_id']}" + (
      "" if start.get("complete", True) else f", unfinished, at step {start['step']}")


def phase(config: Mapping[str, Any]) -> str:
  """"pretrain" (self-pretraining: objective=denoise), "spt" (a fine-tune from one: spt.init_from
  set) or "" (a run from scratch; every config written before SPT)."""
  if config.get("objective", "classify") == "denoise":
    return "pretrain"
  return "spt" if (config.get("spt") or {}).get("init_from") else ""


_PHASES = {"": "a run from scratch", "pretrain": "a self-pretraining run (lra pretrain)",
           "spt": "a fine-tune (--init-from)"}


def run_name(config: Mapping[str, Any], reference: Mapping[str, Any], *,
             hashed: bool = True) -> str:
  """`<preset>[+<phase>,<departures>]_seed<N>`: e.g. `demo_seed0`,
  `demo+mixers.latte.vapor=True_seed0`, `squares+pretrain_seed0` (lra pretrain), `squares+spt_seed0`
  (its fine-tune), `squares+spt,pretrain.train.num_steps=24000_seed0` (a fine-tune from a longer
  pretraining) or `squares+spt,pretrain.partial=884_seed0` (from step 884 of an unfinished one):
  start_items and the partial step, from the start the config records.

  Two commands that resolve to one config share a folder, and a different config never lands in
  another's folder (a suffix over 80 characters is replaced by its hash, the phase and a partial
  start's step kept). `hashed=False`: the whole suffix, for tables to show what a hashed folder
  name stands for.
  """
  suffix = ",".join([*departures(config, reference), *start_items(config, reference)])
  if hashed and len(suffix) > _MAX_NAME:
    suffix = "cfg-" + hashlib.sha256(suffix.encode()).hexdigest()[:8]
  suffix = ",".join(p for p in (phase(config), _UNSAFE.sub("-", suffix), _partial(config)) if p)
  seed = flatten(config).get(SEED_KEY, 0)
  return f"{config['preset']}{'+' + suffix if suffix else ''}_seed{seed}"


def same_run(stored: Mapping[str, Any], config: Mapping[str, Any],
             reference: Mapping[str, Any]) -> list[str]:
  """Why a run dir's stored config is not the run `config` describes ([] when it is).

  Both are compared through their departures from `reference` (today's preset), plus the seed,
  preset, task, mixer and, for a fine-tune whose config records one, its start.
  """
  reasons = []
  if phase(stored) != phase(config):  # a pretraining, a fine-tune or a run from scratch
    reasons.append(f"it is {_PHASES[phase(stored)]}, this command {_PHASES[phase(config)]}")
  elif start_of(stored) and start_key(stored) != start_key(config):
    reasons.append(f"it started from {describe_start(stored)}, this command from "
                   f"{describe_start(config)}")
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
