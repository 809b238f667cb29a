"""The curves again, for the viewers the field uses: TensorBoard event files and Weights & Biases.

`writers.MetricsWriter` hands every metrics.jsonl record to these, so each viewer gets the same
scalars at the same steps. The config block `log` (configs/common.py) turns them on; both
packages are optional extras, imported only when asked for. Neither changes what a run computes,
so neither is part of a run's identity (lra/runs/run_identity.py).
"""
from __future__ import annotations

import json
import numbers
import secrets
import string
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ml_collections

from lra import errors
from lra.runs import writers

EVENT_FILES = "events.out.tfevents.*"  # the name TensorBoard's writers give their files
WANDB_STATE = "wandb.json"  # the run folder's W&B run: project, id, last step sent


class MissingExtraError(errors.MissingPackage, ValueError):
  """A setting needs a package that is not installed; the message is the install command (a
  ValueError too, as config checks raise)."""


def _require(module: str, setting: str, extra: str) -> None:
  try:
    __import__(module)
  except ImportError:
    # The lock keeps JAX, NumPy and the rest at the versions the suite was tested with (wandb is
    # not in it: the lock then holds only the packages it shares).
    raise MissingExtraError(f"{setting} needs the {extra} package: pip install -c "
                            f"requirements-lock.txt -e \".[{extra}]\" (from the repository; "
                            f"elsewhere pip install {extra})") from None


def check(config: ml_collections.ConfigDict) -> None:
  """Raises MissingExtraError before any work when a `log` setting's package is missing."""
  if config.log.tensorboard:
    _require("tensorboard.summary.writer.event_file_writer", "--config.log.tensorboard=True",
             "tensorboard")
  if config.log.wandb:
    _require("wandb", f"--config.log.wandb={config.log.wandb}", "wandb")


def open_loggers(config: ml_collections.ConfigDict, run_dir: Path, resume_step: int | None,
                 name: str) -> list[Any]:
  """The loggers `config.log` asks for, continuing from `resume_step` (None: a fresh curve).

  Args:
    name: how viewers label the run (task/mixer/run folder).
  """
  check(config)
  opened: list[Any] = []
  if config.log.tensorboard:
    opened.append(TensorBoard(run_dir, resume_step))
  if config.log.wandb:
    opened.append(WandB(config.log.wandb, run_dir, resume_step, name=name,
                        config=config.to_dict()))
  return opened


def _scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
  return {k: float(v) for k, v in metrics.items()
          if isinstance(v, numbers.Real) and not isinstance(v, bool)}


class TensorBoard:
  """Event files in the run folder itself, so `tensorboard --logdir results/local/runs` names
  each run by its folder (task/mixer/preset+changes_seedN).

  A fresh curve deletes the folder's old event files. A resumed run writes a new file that
  starts with a SessionLog START at the first step after the checkpoint: TensorBoard's reader
  then drops what an earlier attempt wrote past the checkpoint, as metrics.jsonl drops it.
  """

  def __init__(self, run_dir: Path, resume_step: int | None):
    # TensorBoard's own EventFileWriter, kept rather than tensorboardX's SummaryWriter (issue 59):
    # it is the writer PyTorch's torch.utils.tensorboard.SummaryWriter writes through, so it is
    # as stable as that API, and purge_step there is this same SessionLog START at the resume
    # step. tensorboardX would add a second package (and its own protobuf bound) beside the
    # `tensorboard` this extra installs anyway, for the ~20 lines below.
    from tensorboard.compat.proto import event_pb2, summary_pb2  # the optional extra
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    self._event, self._summary = event_pb2, summary_pb2
    run_dir = Path(run_dir)
    if resume_step is None:
      for old in run_dir.glob(EVENT_FILES):
        old.unlink()
    self._writer = EventFileWriter(str(run_dir))
    if resume_step is not None:
      self._writer.add_event(event_pb2.Event(
          wall_time=time.time(), step=resume_step + 1,
          session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)))

  def write(self, step: int, metrics: Mapping[str, Any]) -> None:
    values = [self._summary.Summary.Value(tag=k, simple_value=v)
              for k, v in _scalars(metrics).items()]
    self._writer.add_event(self._event.Event(wall_time=time.time(), step=step,
                                             summary=self._summary.Summary(value=values)))
    self._writer.flush()  # as metrics.jsonl: a kill loses no point already written

  def close(self) -> None:
    self._writer.close()


class WandB:
  """One W&B run per run folder; its id is kept in the folder (wandb.json), so a resumed run
  continues the same W&B run, and W&B's own files go to the folder's wandb/.

  W&B keeps one value per step and ignores steps below its latest, so a resumed run sends only
  the steps after the last one sent before (a run resumes exactly: the values would be equal).
  """

  def __init__(self, project: str, run_dir: Path, resume_step: int | None, *, name: str,
               config: Mapping[str, Any]):
    import wandb  # the optional extra
    self._state_path = Path(run_dir) / WANDB_STATE
    state = None
    if resume_step is not None and self._state_path.exists():
      state = json.loads(self._state_path.read_text())
    if state is None or state.get("project") != project:
      state = {"project": project, "id": _new_run_id(), "step": -1}
    self._state = state
    self._sent_before = state["step"]
    self._run = wandb.init(project=project, id=state["id"], resume="allow", name=name,
                           dir=str(run_dir), config=dict(config))
    writers.write_json_atomic(self._state_path, state)

  def write(self, step: int, metrics: Mapping[str, Any]) -> None:
    if step <= self._sent_before:
      return
    self._run.log(_scalars(metrics), step=step)
    if step != self._state["step"]:
      self._state["step"] = step
      writers.write_json_atomic(self._state_path, self._state)

  def close(self) -> None:
    self._run.finish()


def _new_run_id() -> str:
  """Eight lower-case letters and digits, the form of W&B's own run ids."""
  return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
