"""`lra run TASK MIXER`: resolve the config (once), make sure the data exists, pick the run dir,
train. `run` takes the command's words; `run_config` a config already resolved (lra.cli.run
resolves it once and passes it on)."""
from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ml_collections

from lra import errors
from lra.machine import stop_after
from lra.runs import loggers, pack, run_identity, run_lock, start
from lra.training import init_from, train
from lra.runs.config_loading import (default_data_dir, default_run_dir, load_data,
                                     reference_config, resolve_config)
from lra.machine.memory import OutOfMemoryError
from lra.models.build import input_words
from lra.base import progress as data_progress


def run(task: str, mixer: str, *, preset: str = "paper", overrides: Sequence[str] = (),
        data_dir: Path | None = None, run_dir: Path | None = None,
        results_dir: Path = Path("results"), progress: bool = True,
        stop_after_s: float | None = None) -> dict[str, Any]:
  """Trains and evaluates one (task, mixer) pair; resumes an unfinished run in the same dir.
  Returns final.json's dict with the run's folder added (`run_dir`).

  `stop_after_s`: stop (resumable) so as to end within that many seconds of the command's start.

  The run directory is locked first (one run per folder; checked writable before anything else).
  A run that does not fit in memory leaves no folder behind if it held nothing before and no
  checkpoint now.
  """
  return run_config(resolve_config(task, mixer, preset, overrides), data_dir=data_dir,
                    run_dir=run_dir, results_dir=results_dir, progress=progress,
                    stop_after_s=stop_after_s)


def run_config(config: ml_collections.ConfigDict, *, data_dir: Path | None = None,
               run_dir: Path | None = None, results_dir: Path = Path("results"),
               progress: bool = True, stop_after_s: float | None = None,
               reference: dict[str, Any] | None = None) -> dict[str, Any]:
  """`run` of a resolved config (lra.runs.config_loading.resolve_config): the same checks, run
  folder and training, the config resolved once for all of them. `reference`: today's preset
  (reference_config), where the caller has it. A fine-tune's start is recorded in `config`
  (lra.runs.start.resolve) unless the caller did."""
  stop_after.check_limit(stop_after_s)
  loggers.check(config)  # a missing TensorBoard or W&B package: one line before any work
  # Today's preset, which the run's name and a folder's earlier run are measured against.
  if reference is None:
    reference = reference_config(config.to_dict()).to_dict()
  own = start.resolve(config, results_dir, run_dir)
  start.require(config)
  run_dir = Path(run_dir or own or default_run_dir(config, results_dir, reference))
  fresh = not run_dir.exists() or not any(run_dir.iterdir())
  if run_identity.phase(config) == "spt" and not start.begun(run_dir):
    # A fine-tune's start is checked when it starts; once it holds a checkpoint (or is complete)
    # it continues its own state, wherever its pretraining has gone (another machine, deleted).
    init_from.check(config.to_dict(), Path(config.spt.init_from))
  try:
    with run_lock.hold(run_dir):
      return {**_run_locked(config, reference, run_dir, data_dir, progress, stop_after_s),
              "run_dir": str(run_dir)}
  except OutOfMemoryError:
    if fresh and not start.has_checkpoint(run_dir):
      shutil.rmtree(run_dir, ignore_errors=True)
    raise


def _run_locked(config: ml_collections.ConfigDict, reference: dict[str, Any], run_dir: Path,
                data_dir: Path | None, progress: bool,
                stop_after_s: float | None = None) -> dict[str, Any]:
  task, mixer, preset = config.task, config.model.mixer, config.preset
  # Before the data, which may take minutes to generate; in the words of the dry run.
  refused = pack.refusal(run_dir, config.to_dict(), reference)
  if refused:
    raise errors.Conflict(f"{run_dir} {refused}.")
  with data_progress.quiet(not progress):  # generation and preparation show theirs unless --quiet
    data = load_data(config, data_dir or default_data_dir())
  final_path = run_dir / "final.json"
  recorded = json.loads(final_path.read_text()) if final_path.exists() else {}
  if recorded.get("status") == "complete":
    print(f"{run_dir} is already complete; delete it to run again.", file=sys.stderr)
    return recorded
  changes = run_identity.data_changes(recorded.get("data") or {}, train.data_record(data.meta))
  if recorded.get("step") and changes:
    # A resumed run on other data would report one score for two datasets, and its best-val
    # step would compare accuracies measured on different val sets.
    raise errors.BadValue(
        f"{run_dir} was trained to step {recorded['step']} on other data than "
        f"{data.cache_dir} holds ({'; '.join(changes)}). Point --data-dir at the data it was "
        "trained on, or start a new run: --run-dir NEW, or delete that folder.")
  if progress:
    print(f"{task} x {mixer} ({preset}): {input_words(config, data.spec.seq_len)}, "
          f"{data.num_examples('train')} train examples -> {run_dir.resolve()}",
          file=sys.stderr)
  return train.train_and_evaluate(config, data, run_dir, progress=progress,
                                  stop_after_s=stop_after_s)
