"""Reading run directories: every run's final.json as a DataFrame, a run's curves, seed summaries.

Notebooks and `lra table` read results/ through this module only, so the layout
`results/runs/<task>/<mixer>/<run>/{config.json,metrics.jsonl,final.json}` is known in one place.
A run file that cannot be read (truncated, corrupted) is named in a RunFileWarning and its run
(or, for metrics.jsonl, its curves) is skipped; `unreadable_run_files` lists them all.
"""
from __future__ import annotations

import json
import math
import re
import statistics
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

import ml_collections

from lra import errors
from lra.models.build import tokens_seen
from lra.report.table_rules import COMMITTED, YOURS
from lra.runs import start
from lra.runs import run_identity
from lra.runs.config_loading import preset_reference, run_key
from lra.runs.run_identity import as_trained, flatten

_SEED_SUFFIX = re.compile(r"_seed\d+$")
LOCAL = "local"  # results/local/: your runs and tables (git-ignored), beside the committed ones
# Columns of load_runs() taken from final.json as they are (nested dicts are flattened elsewhere).
FINAL_KEYS = ("status", "task", "mixer", "preset", "seed", "step", "num_steps", "best_step",
              "val_accuracy", "test_accuracy", "best_test_accuracy", "best_test_step",
              "test_accuracy_last", "chance_accuracy", "majority_accuracy", "num_params",
              "steps_per_s", "wall_time_s", "examples_seen", "seq_len", "device", "num_devices",
              "cpu_cores", "git_sha", "objective", "tokens")
# The three statistics a run reports, by the final.json key that holds each.
ACCURACIES = ("test_accuracy", "best_test_accuracy", "test_accuracy_last")
# `lra table` writes every run's key (config_id) and speed here, so a dry run's cost lookup reads
# the committed runs' keys instead of resolving each one's preset (`lra table --check` keeps it).
RUN_INDEX = Path("tables") / "runs.csv"
INDEX_COLUMNS = ("run_dir", "task", "mixer", "preset", "seed", "status", "config_id", "num_steps",
                 "steps_per_s", "wall_time_s", "device", "cpu_cores")


def find_results_dir(start: Path | str | None = None) -> Path:
  """The nearest `results/` folder holding `runs/`, searching `start` (default cwd) and parents.

  Lets a notebook opened from notebooks/ or a script run from the repo root find the same runs.
  """
  here = Path(start or Path.cwd()).resolve()
  for folder in (here, *here.parents):
    if (folder / "results" / "runs").is_dir():
      return folder / "results"
    if folder.name == "results" and (folder / "runs").is_dir():
      return folder
  raise errors.NotFound(f"No results/runs/ folder in {here} or its parents; run "
                        "`lra run TASK MIXER` first, or pass the results folder explicitly.")


def committed_results_dir() -> Path | None:
  """The repository's committed results/ (holding runs/) when this suite runs from a checkout
  (`pip install -e .`), wherever the working directory is; None for an installed copy."""
  folder = Path(__file__).resolve().parents[2] / "results"
  return folder if (folder / "runs").is_dir() else None


def own_source(results_dir: Path | str) -> str:
  """Whose runs a folder's own are: the repository's committed results (`lra table
  --committed`) are COMMITTED, any other folder's are YOURS (lra.report.table_rules)."""
  committed = committed_results_dir()
  return (COMMITTED if committed is not None
          and Path(results_dir).resolve() == committed.resolve() else YOURS)


class RunFileWarning(UserWarning):
  """A run file that cannot be read; what uses it skips it."""


def _problem(path: Path, what: str) -> str:
  return (f"{path}: {what}; skipped. Rerun that run's `lra run` command to rewrite it, or delete "
          f"{path.parent} if the run is not wanted.")


def _json_problem(path: Path) -> tuple[dict | None, str | None]:
  """A JSON object file's content, or what is wrong with it."""
  try:
    data = json.loads(path.read_text())
  except (OSError, UnicodeDecodeError) as e:
    return None, _problem(path, f"cannot be read ({e})")
  except json.JSONDecodeError as e:
    return None, _problem(path, f"not valid JSON (truncated or corrupted: {e})")
  if not isinstance(data, dict):
    return None, _problem(path, f"expected a JSON object, found {type(data).__name__}")
  return data, None


def _metrics_problem(path: Path) -> tuple[list[dict], str | None]:
  """metrics.jsonl's rows and what is wrong with it, if anything.

  A last line cut short (no newline: a kill while writing it) loses that line only; any other
  bad line means the file is corrupted and no row is trusted.
  """
  try:
    text = path.read_text()
  except (OSError, UnicodeDecodeError) as e:
    return [], _problem(path, f"cannot be read ({e})")
  lines = text.splitlines()
  rows = []
  for number, line in enumerate(lines, start=1):
    try:
      row = json.loads(line)
    except json.JSONDecodeError:
      row = None
    if not isinstance(row, dict) or not isinstance(row.get("step"), int):
      if number == len(lines) and not text.endswith("\n"):
        return rows, (f"{path}: line {number} is cut short (a kill while writing it); that line "
                      "is skipped.")
      return [], _problem(path, f"line {number} is not a metrics record (corrupted)")
    rows.append(row)
  return rows, None


def unreadable_run_files(results_dir: Path | str = "results") -> list[str]:
  """One message per final.json, config.json or metrics.jsonl under runs/ that cannot be read."""
  problems = []
  for path in sorted(Path(results_dir).glob("runs/*/*/*/*")):
    if path.name in ("final.json", "config.json"):
      problems.append(_json_problem(path)[1])
    elif path.name == "metrics.jsonl":
      problems.append(_metrics_problem(path)[1])
  return [p for p in problems if p]


def count_runs(results_dir: Path | str, status: str = "complete") -> int:
  """How many runs under results_dir/runs/ have this status (unreadable final.json: not counted)."""
  finals = (_json_problem(path)[0] for path in Path(results_dir).glob("runs/*/*/*/final.json"))
  return sum(final is not None and final.get("status") == status for final in finals)


def load_runs(results_dir: Path | str = "results", *, status: str | None = None,
              task: str = "*", mixer: str = "*") -> pd.DataFrame:
  """One row per run directory with a final.json, sorted by task, mixer and run name.

  A run whose final.json or config.json cannot be read is skipped with a RunFileWarning.

  Args:
    results_dir: the folder holding runs/.
    status: keep only runs with this status ("complete", "diverged", "interrupted", "running");
      None keeps all.
    task, mixer: only the runs of this task and mixer folder (default: all).

  Returns:
    A DataFrame with FINAL_KEYS plus `run` (the folder name), `variant` (the run name without its
    `_seedN` suffix: runs of one variant and config are seeds of one experiment), `run_dir`
    (relative to results_dir's parent, with forward slashes), `config_id` (the run's key:
    lra.runs.config_loading.run_key, its preset, departures and a fine-tune's start) and
    `config` (the run's config.json, flattened to `a.b` keys) and `state`: the status, with an
    unfinished run "in progress" (a live process holds it) or "stopped" (resumable by its
    command: run_summary.resume_text).
  """
  results_dir = Path(results_dir)
  rows = []
  for final_path in sorted(results_dir.glob(f"runs/{task}/{mixer}/*/final.json")):
    run_dir = final_path.parent
    final, problem = _json_problem(final_path)
    config_path = run_dir / "config.json"
    config = {}
    if problem is None and config_path.exists():
      config, problem = _json_problem(config_path)
      # As trained, and a fine-tune's start as recorded (or, from before the record, as read).
      config = (start.as_recorded(as_trained(config), final, results_dir.parent)
                if problem is None else config)
    if problem is not None:
      warnings.warn(problem, RunFileWarning, stacklevel=2)
      continue
    row = {key: final.get(key) for key in FINAL_KEYS}
    if row["tokens"] is None and row["seq_len"] is not None and config:  # from before "tokens"
      row["tokens"] = tokens_seen(ml_collections.ConfigDict(config), int(row["seq_len"]))
    row.update(run=run_dir.name, variant=_variant(run_dir.name, config),
               run_dir=run_dir.relative_to(results_dir.parent).as_posix(),
               config_id=run_key(config), config=flatten(config),
               state=_state(final, run_dir))
    rows.append(row)
  columns = [*FINAL_KEYS, "run", "variant", "run_dir", "config_id", "config", "state"]
  runs = pd.DataFrame(rows, columns=columns)
  if status is not None:
    runs = runs[runs["status"] == status]
  return runs.sort_values(["task", "mixer", "run"], kind="stable").reset_index(drop=True)


def read_index(results_dir: Path | str, task: str, mixer: str) -> pd.DataFrame | None:
  """The runs of one task and mixer folder as `lra table` indexed them (RUN_INDEX: each run's
  key and speed, no preset resolved), or None where the folder has no index."""
  path = Path(results_dir) / RUN_INDEX
  if not path.is_file():
    return None
  runs = pd.read_csv(path, comment="#", dtype={"config_id": str})
  return runs[(runs["task"] == task) & (runs["mixer"] == mixer)]


def _state(final: dict[str, Any], run_dir: Path) -> str:
  from lra.report import run_summary  # pylint: disable=import-outside-toplevel
  if final.get("status") not in ("running", "interrupted"):
    return str(final.get("status"))
  return "stopped" if run_summary.stopped(final, run_dir) else "in progress"


def load_curves(run_dir: Path | str) -> pd.DataFrame:
  """A run's metrics.jsonl as one row per step (train and eval lines of a step merged).

  Columns are `step` plus the flat metric keys (`train/loss`, `val/accuracy`, ...); a metric not
  logged at a step is NaN there. A RunFileWarning names a damaged file: a last line cut short is
  dropped, any other bad line drops the whole file (no rows).
  """
  path = Path(run_dir) / "metrics.jsonl"
  rows, problem = _metrics_problem(path) if path.exists() else ([], None)
  if problem is not None:
    warnings.warn(problem, RunFileWarning, stacklevel=2)
  if not rows:
    return pd.DataFrame({"step": pd.Series(dtype=int)})
  frame = pd.DataFrame(rows)
  return frame.groupby("step", as_index=False).first().sort_values("step").reset_index(drop=True)


def load_runs_with_local(results_dir: Path | str = "results", *,
                         status: str | None = None) -> pd.DataFrame:
  """`load_runs` of the committed runs (results_dir/runs) and of yours (results_dir/local/runs,
  where `lra run` writes by default), one after the other, with a `source` column: "committed"
  or "yours". Both `run_dir`s are relative to results_dir's parent, so `load_all_curves(runs,
  results_dir)` reads either; group by `source` before averaging seeds, so yours never blend in.
  """
  results_dir = Path(results_dir)
  frames = [load_runs(results_dir, status=status).assign(source="committed")]
  local = results_dir / LOCAL
  if (local / "runs").is_dir():
    yours = load_runs(local, status=status).assign(source="yours")
    yours["run_dir"] = [f"{results_dir.name}/{d}" for d in yours["run_dir"]]
    frames.append(yours)
  return pd.concat(frames, ignore_index=True)


def load_all_curves(runs: pd.DataFrame, results_dir: Path | str = "results") -> pd.DataFrame:
  """Curves of every run in `runs` (from load_runs), long by step, with the run's identity
  columns (task, mixer, preset, variant, seed, run, and source where `runs` has it) beside each
  step's metrics."""
  parent = Path(results_dir).parent
  identity = ("task", "mixer", "preset", "variant", "seed", "run",
              *(("source",) if "source" in runs else ()))
  frames = []
  for run in runs.itertuples(index=False):
    curves = load_curves(parent / run.run_dir)
    for key in identity:
      curves[key] = getattr(run, key)
    frames.append(curves)
  if not frames:
    return pd.DataFrame(columns=["step", "task", "mixer", "preset", "variant", "seed", "run"])
  return pd.concat(frames, ignore_index=True)


def _variant(name: str, config: dict[str, Any]) -> str:
  """A run folder's name without its seed: what tables print beside the preset. A name whose long
  suffix was hashed (`cfg-...`) is spelt out from its config, so a table says what the row is."""
  variant = _SEED_SUFFIX.sub("", name)
  if "cfg-" not in variant or not config:
    return variant
  reference = preset_reference(config)
  return variant if reference is None else _SEED_SUFFIX.sub(
      "", run_identity.run_name(config, reference, hashed=False))


def _numbers(values: Iterable[float | None]) -> list[float]:
  """The values that are numbers (a run without a statistic has None or NaN there)."""
  return [float(v) for v in values if v is not None and not _isnan(v)]


def _mean_std(values: Iterable[float | None]) -> tuple[float | None, float | None]:
  xs = _numbers(values)
  if not xs:
    return None, None
  return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else None)


def _isnan(value: Any) -> bool:
  return isinstance(value, float) and math.isnan(value)


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
  """Mean and sample std over seeds of each experiment in `runs` (pass complete runs only).

  An experiment is (task, mixer, preset, variant, config_id). When one (task, mixer, variant)
  holds runs with different configs, its label gets the config id so they never blend.

  Returns:
    One row per experiment: task, mixer, preset, label (what tables print as the preset),
    num_runs, runs (names joined by ';'), config (the first run's flat config), and mean / `_std`
    of the three statistics (test_accuracy at the best val step, best_test_accuracy,
    test_accuracy_last) and of val_accuracy; test_accuracy_min / _max over the seeds; means of
    chance_accuracy, majority_accuracy, steps_per_s, examples_seen, wall_time_s; num_params,
    seq_len, tokens (what the model reads: seq_len over the squares' pixels), num_steps when the
    seeds agree; device (distinct devices joined by ';').
    Accuracies stay fractions in 0..1.
  """
  keys = ["task", "mixer", "preset", "variant", "config_id"]
  rows = []
  if runs.empty:
    return pd.DataFrame(columns=[*keys, "label", "num_runs", "runs"])
  configs_per_variant = runs.groupby(["task", "mixer", "variant"],
                                     dropna=False)["config_id"].nunique()
  for key, group in runs.groupby(keys, sort=True, dropna=False):
    task, mixer, preset, variant, config_id = key
    label = preset if variant == preset else f"{preset} ({variant})"
    if configs_per_variant[(task, mixer, variant)] > 1:
      label += f" [config {config_id}]"
    row = dict(zip(keys, key), label=label, num_runs=len(group),
               runs=";".join(sorted(group["run"])), config=group["config"].iloc[0])
    for metric in (*ACCURACIES, "val_accuracy"):
      row[metric], row[metric + "_std"] = _mean_std(group[metric])
    # The seeds' ends as well as their spread: a seed that never leaves chance shows as the min.
    seeds = _numbers(group["test_accuracy"])
    row["test_accuracy_min"] = min(seeds) if seeds else None
    row["test_accuracy_max"] = max(seeds) if seeds else None
    for metric in ("chance_accuracy", "majority_accuracy", "steps_per_s", "examples_seen",
                   "wall_time_s"):
      row[metric] = _mean_std(group[metric])[0]
    for metric in ("num_params", "seq_len", "tokens", "num_steps"):
      values = sorted({int(v) for v in _numbers(group[metric])})
      row[metric] = values[0] if len(values) == 1 else None
    row["device"] = ";".join(sorted({str(d) for d in group["device"] if d}))
    rows.append(row)
  return pd.DataFrame(rows)
