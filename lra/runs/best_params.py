"""The best checkpoint's parameters on their own: what `lra pack` carries of the best step.

A packed run keeps the best validation step's parameters (and BatchNorm's running statistics)
without its optimizer state, a third of the full state's bytes, as
`checkpoints/best_params/<step>.msgpack` (Flax's msgpack of the arrays). `lra eval --checkpoint
best` reads them when they are newer than any Orbax best checkpoint in the folder: a run resumed
after unpacking saves a new best checkpoint only when validation improves on the carried one.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import serialization

from lra import errors

FOLDER = "best_params"
_NAME = re.compile(r"^(\d+)\.msgpack$")
# What `model.apply` reads for inference, as lra.training.train.model_variables names it.
INFERENCE_KEYS = ("params", "batch_stats")


def carried(run_dir: Path) -> tuple[int, Path] | None:
  """The newest `checkpoints/best_params/<step>.msgpack` of a run folder: (step, path)."""
  folder = Path(run_dir) / "checkpoints" / FOLDER
  found = [(int(m.group(1)), p) for p in folder.glob("*.msgpack") if (m := _NAME.match(p.name))]
  return max(found) if found else None


def from_orbax(step_dir: Path) -> bytes:
  """The inference variables of an Orbax best checkpoint (`checkpoints/best/<step>`), as msgpack.

  Reads the saved tree without a model: the state's `params` (and `batch_stats`) only.
  """
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  # Read as a bare tree, the item folder has no _CHECKPOINT_METADATA (its manager keeps that one
  # level up), and Orbax warns so on every fine-tune's start: a line a user cannot act on.
  absl = logging.getLogger("absl")
  level = absl.level
  absl.setLevel(logging.ERROR)
  try:
    return _read_inference(ocp, step_dir)
  finally:
    absl.setLevel(level)


def _read_inference(ocp: Any, step_dir: Path) -> bytes:
  with ocp.PyTreeCheckpointer() as reader:
    # NumPy on the host: no device placement, and the sharding saved with it is not needed.
    metadata = reader.metadata(Path(step_dir).resolve() / "state")
    tree = getattr(metadata, "item_metadata", None) or getattr(metadata, "tree", None) or metadata
    wanted = {k: v for k, v in dict(tree).items() if k in INFERENCE_KEYS}
    args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), wanted)
    restored = reader.restore(Path(step_dir).resolve() / "state", args=ocp.args.PyTreeRestore(
        item=wanted, restore_args=args, partial_restore=True))
  return serialization.msgpack_serialize({k: restored[k] for k in INFERENCE_KEYS if k in restored})


def write(run_dir: Path, step: int, data: bytes) -> Path:
  path = Path(run_dir) / "checkpoints" / FOLDER / f"{step}.msgpack"
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(data)
  return path


def apply(state: Any, path: Path) -> Any:
  """`state` (a TrainState, replicated) with its params (and batch_stats) from `path`.

  Raises:
    ValueError: the file does not hold this model's parameters (names the file).
  """
  saved = serialization.msgpack_restore(Path(path).read_bytes())
  updates = {}
  for key in INFERENCE_KEYS:
    target = getattr(state, key, None)
    if target is None:
      continue
    if key not in saved:
      raise errors.BadValue(f"{path} holds no {key}: it was not packed from this run's model")
    try:
      values = serialization.from_state_dict(target, saved[key])
    except (ValueError, KeyError) as error:
      raise errors.BadValue(f"{path} does not hold this run's {key} ({error})") from None
    shapes = jax.tree.map(np.shape, target), jax.tree.map(np.shape, values)
    if shapes[0] != shapes[1]:
      raise errors.BadValue(f"{path}: its {key} have other shapes than this run's model")
    shardings = jax.tree.map(lambda a: a.sharding, target)
    updates[key] = jax.tree.map(lambda v, like, s: jax.device_put(np.asarray(v, like.dtype), s),
                                values, target, shardings)
  return state.replace(**updates)
