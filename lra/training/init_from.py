"""A fine-tune's start (`lra run ... --init-from PRETRAIN_RUN_DIR`): the encoder of a
self-pretraining run's best checkpoint, loaded into a fresh classifier (its head stays new).

`check` runs before anything else (a one-line refusal, exit 2: not a pretraining run, unfinished
without --allow-partial, another encoder, other data); `load` runs once, at step 0 of the
fine-tune, loads the checkpoint the start its config records names (lra.runs.start) and returns
the record its final.json keeps. A resumed fine-tune continues from its own checkpoints and never
calls it again.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import serialization
from flax.training.train_state import TrainState

from lra import errors
from lra.runs import best_params, run_identity, start, writers

# Settings of `model` that leave the encoder's parameters and function as they are: the
# fine-tune may choose its own (dropout, the compute dtype, the classifier's head, ...).
FREE_MODEL_KEYS = ("dropout", "dtype", "remat", "mlp_hidden_dropout", "head", "bn_momentum")
# Mixer settings that choose how a layer computes, not what.
FREE_MIXER_KEYS = ("implementation", "query_chunk")
ENCODER_VARIABLES = ("params", "batch_stats")
HIDDEN_TOKEN = "mask_token"  # the Denoiser's own vector (models/denoiser.py): not the classifier's


def read(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
  """(config, final) of a pretraining run folder, or a one-line error saying what it is not."""
  run_dir = Path(run_dir)
  if not (run_dir / "config.json").is_file() or not (run_dir / "final.json").is_file():
    raise errors.NotFound(f"--init-from {run_dir}: not a run folder (no config.json and "
                          "final.json); pass the folder `lra pretrain` printed")
  config = run_identity.read_config(run_dir / "config.json")
  final = json.loads((run_dir / "final.json").read_text())
  if run_identity.phase(config) != "pretrain":
    raise errors.BadValue(f"--init-from {run_dir}: a run of objective "
                          f"{config.get('objective', 'classify')!r}, not a self-pretraining run; "
                          f"make one with `lra pretrain {config['task']} MIXER --preset "
                          f"{config['preset']}`")
  return config, final


# The pretraining's own settings a fine-tune's config carries, so that its config.json says how its
# start was made: the seed pairs them (pretraining seed N, fine-tune seed N) and the denoising
# settings are the pretraining's, not choices of the fine-tune.
PAIRED_KEYS = (run_identity.SEED_KEY, "spt.mask_ratio", "spt.loss", "spt.pixel_levels")


def check(config: Mapping[str, Any], run_dir: Path) -> None:
  """Refuses a fine-tune `config` whose encoder, seed or denoising settings are not the
  pretraining run's, or an unfinished pretraining run unless spt.allow_partial. One line, both
  values named, and the command that mends it."""
  pretrained, final = read(run_dir)
  ours, theirs = run_identity.flatten(config), run_identity.flatten(pretrained)
  mixer = ours.get("model.mixer")
  keys = ["task", "model.mixer", "mixer_source.sha256", *PAIRED_KEYS]
  keys += sorted(k for k in ours.keys() | theirs.keys() if k.startswith("model.")
                 and k.split(".", 1)[1] not in FREE_MODEL_KEYS and k != "model.mixer")
  keys += sorted(k for k in ours.keys() | theirs.keys() if k.startswith(f"mixers.{mixer}.")
                 and k.rsplit(".", 1)[1] not in FREE_MIXER_KEYS)
  for key in keys:
    if ours.get(key) != theirs.get(key):
      raise errors.BadValue(f"--init-from {run_dir}: {_mismatch(key, theirs, ours)}")
  status = final.get("status")
  if status != "complete" and not ours.get("spt.allow_partial"):
    raise errors.BadValue(
        f"--init-from {run_dir}: the pretraining run is {status} at step {final.get('step')} of "
        f"{final.get('num_steps')}; finish it (the same `lra pretrain` command resumes it), or "
        f"pass --allow-partial to start from its best checkpoint so far (step "
        f"{final.get('best_step')})")


def _mismatch(key: str, theirs: Mapping[str, Any], ours: Mapping[str, Any]) -> str:
  """Why a fine-tune cannot start from the pretraining run: `key` differs, said for its kind."""
  there, here = theirs.get(key), ours.get(key)
  pretrain = (f"lra pretrain {ours.get('task')} {ours.get('model.mixer')} --preset "
              f"{ours.get('preset')}")
  if key == "task":
    return (f"it pretrained on {there}, this fine-tune is on {here}; pretrain on {here} first "
            f"({pretrain})")
  if key == "model.mixer":
    return (f"it pretrained mixer {there}, this fine-tune builds {here}; fine-tune {there} from "
            f"it, or pretrain {here} first ({pretrain})")
  if key == "mixer_source.sha256":
    return ("its own mixer's file is not the one this fine-tune loads (the sha256 of its source "
            "differs: edited since?); pretrain with this file first, or restore the file it used")
  if there is None or here is None:
    side = "this suite's config" if there is None else "its config"
    return (f"{key} is absent from {side} (another version of the suite wrote the other); "
            f"pretrain again with this version ({pretrain})")
  if key == run_identity.SEED_KEY:
    return (f"it was pretrained with seed {there}, this fine-tune has seed {here}; a fine-tune "
            f"takes its pretraining's seed (pass --seed {there}), or pretrain with --seed {here}")
  return (f"{key} is {there!r} there and {here!r} here; a fine-tune builds the pretrained encoder "
          f"and records how it was pretrained (pass --config.{key}={there}, or pretrain with this "
          "setting)")


def _best_variables(run_dir: Path, recorded: int) -> dict[str, Any]:
  """The inference variables of a run's newest best checkpoint (an Orbax one, or the best
  parameters `lra unpack` carried), which must be the step the fine-tune's start records."""
  step = start.best_step(run_dir)
  if step is None:
    raise errors.NotFound(
        f"--init-from {run_dir}: no best checkpoint (checkpoints/ is not kept in git: unpack the "
        "run's pack (lra unpack RUN/run.pack), or run the pretraining here)")
  if step != recorded:
    raise errors.Conflict(
        f"--init-from {run_dir}: its best checkpoint is step {step} now, not step {recorded} "
        "as when this command started (the pretraining is still running?); run the command "
        "again")
  carried = best_params.carried(run_dir)
  if carried is not None and carried[0] == step:
    return serialization.msgpack_restore(carried[1].read_bytes())
  return serialization.msgpack_restore(
      best_params.from_orbax(Path(run_dir) / "checkpoints" / "best" / str(step)))


def load(state: TrainState, config: Mapping[str, Any], data_record: Mapping[str, Any]
         ) -> tuple[TrainState, dict[str, Any]]:
  """`state` (a fresh classifier's, replicated) with the pretraining run's encoder from the step
  the config's start records, and the record final.json keeps of it: the folder, its key, the
  step and held-out score loaded, and a sha256 of the loaded parameters.

  Raises:
    BadValue: the pretraining ran on other data, or its encoder does not fit this model.
  """
  run_dir = Path(config["spt"]["init_from"])
  _, final = read(run_dir)  # a pretraining run's, checked
  theirs = (final.get("data") or {}).get("arrays_sha256")
  if theirs and data_record.get("arrays_sha256") and theirs != data_record["arrays_sha256"]:
    raise errors.BadValue(f"--init-from {run_dir}: it was pretrained on other data than this "
                          "fine-tune reads (the prepared arrays differ); pass the --data-dir it "
                          "used")
  recorded = config["spt"]["start"]
  saved = _best_variables(run_dir, recorded["step"])
  updates, loaded = {}, {}
  for kind in ENCODER_VARIABLES:
    target = getattr(state, kind, None)
    if target is None or "encoder" not in target:
      continue
    encoder = {k: v for k, v in saved.get(kind, {}).get("encoder", {}).items()
               if k != HIDDEN_TOKEN}
    shapes = (jax.tree.map(np.shape, dict(target["encoder"])), jax.tree.map(np.shape, encoder))
    if shapes[0] != shapes[1]:
      raise errors.BadValue(f"--init-from {run_dir}: its encoder's {kind} are not this model's "
                            "(another size or mixer setting); pretrain with this fine-tune's "
                            "model settings")
    loaded[kind] = encoder
    placed = jax.tree.map(lambda value, like: jax.device_put(np.asarray(value, like.dtype),
                                                             like.sharding),
                          encoder, dict(target["encoder"]))
    updates[kind] = {**target, "encoder": placed}
  digest = hashlib.sha256(serialization.msgpack_serialize(loaded)).hexdigest()
  record = {"run_dir": writers.portable(str(run_dir.resolve())), "status": final.get("status"),
            "config_id": recorded["config_id"],
            "step": recorded["step"], "num_steps": final.get("num_steps"),
            "val_accuracy": final.get("val_accuracy"), "val_loss": final.get("val_loss"),
            "params_sha256": digest}
  return state.replace(**updates), record
