"""`lra run TASK MIXER --dry-run`: the resolved config with where each value comes from, the
data and run folders the run would use, and what it costs where a speed of the same config is
known. Nothing is trained, generated or written.

A cost comes from a measurement of the same program (the same task, mixer, preset and departures
from it; any seed): runs of it (the repository's committed runs and yours: their steps/s, and the
wall time of complete ones), `lra bench --epoch` records (results/bench/*.json and
RESULTS_DIR/bench/*.json) of its batching, and the ledger of paper rows (results/ledger.json:
measured or estimated GPU speeds, each with its source).
"""
from __future__ import annotations

import importlib
import json
import shlex
import statistics
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ml_collections

from lra.runs import run_identity, start
from lra.tasks import TASKS
from lra.runs.config_loading import (data_cache_dir, default_data_dir, default_run_dir, mixer_label,
                                     missing_data, resolve_config, run_key)

DEFAULT, PRESET, COMMAND_LINE = "default", "preset", "command line"
# What the command's own words choose (TASK, MIXER, --preset; `lra pretrain`, --init-from,
# --allow-partial), not a setting.
NAMED_BY_COMMAND = ("task", "preset", "model.mixer", "objective", "spt.init_from",
                    "spt.allow_partial")


def sources(config: ml_collections.ConfigDict,
            reference: dict[str, Any]) -> list[tuple[str, Any, str]]:
  """(key, value, source) for every key the run reads, other mixers' blocks and the settings its
  phase does not read left out; `reference`: today's preset in the run's phase (its budget is
  the preset's: lra.runs.config_loading.reference_config).

  source: "default" (configs/<task>.py:defaults), "preset" (the task's preset changed it) or
  "command line" (a --config override, or TASK / MIXER / --preset / --init-from themselves).
  """
  preset_config = run_identity.flatten(reference)
  defaults = run_identity.flatten(importlib.import_module(f"lra.configs.{config.task}").defaults(
      config.preset, config.model.mixer).to_dict())
  flat = run_identity.flatten(config.to_dict())
  own, phase = f"mixers.{config.model.mixer}.", run_identity.phase(config.to_dict())
  rows = []
  for key, value in sorted(flat.items()):
    if (key.startswith("mixers.") and not key.startswith(own)) or not run_identity.reads(phase,
                                                                                         key):
      continue  # other mixers' settings, and what this phase never reads, are not this run's
    named = (key in NAMED_BY_COMMAND or key.startswith("mixer_source.")
             or key.startswith(run_identity.START))
    if named or preset_config.get(key) != value:
      source = COMMAND_LINE
    elif key in defaults and defaults[key] != value:
      source = PRESET
    elif key not in defaults and not key.startswith(own):  # a block the preset filled in
      source = PRESET
    else:
      source = DEFAULT
    rows.append((key, value, source))
  return rows


def _run_folder_state(run_dir: Path, verdict: bool = True) -> str:
  """"new", or where the folder's run stands (and, with `verdict`, what this command does to it:
  not for a fine-tune's pretraining, which the fine-tune only reads)."""
  final = run_dir / "final.json"
  if final.exists():
    try:
      record = json.loads(final.read_text())
      state = f"exists, {record.get('status')} at step {record.get('step'):,}"
      return state + (f": `lra run` {'skips' if record.get('status') == 'complete' else 'resumes'}"
                      " it" if verdict else "")
    except (OSError, ValueError):
      return "exists, final.json unreadable"
  return "exists, no final.json yet" if run_dir.exists() else "new"


def _duration(seconds: float) -> str:
  minutes = seconds / 60
  if minutes < 1:
    return f"{seconds:.0f} s"
  return f"{minutes:.0f} min" if minutes < 90 else f"{minutes / 60:.1f} h"


def _program(config: ml_collections.ConfigDict,
             reference: dict[str, Any] | None = None) -> tuple[str, str, str]:
  """(task, mixer label, run key): equal for any seed of one program, as the tables group runs
  (lra.report.results.load_runs' config_id: both are run_key, a fine-tune's start included)."""
  return config.task, mixer_label(config), run_key(config.to_dict(), reference)


def _shown(path: Path) -> str:
  """A record's path as the repository names it (results/ledger.json), else as found."""
  try:
    return Path(path).resolve().relative_to(Path(__file__).resolve().parents[2]).as_posix()
  except ValueError:
    return str(path)


def _device(device: Any, cores: Any) -> str:
  cpu = str(device).startswith("cpu") and cores and cores == cores  # NaN: not recorded
  return str(device) + (f" ({int(cores)} core{'s' if cores > 1 else ''})" if cpu else "")


def _from_runs(program: tuple[str, str, str], steps: int,
               folders: Sequence[tuple[str, Path, bool]]) -> list[str]:
  """One line per (folder, device) holding runs of this program: complete runs' median wall
  time (evaluations included), else training time at the median steps/s. A folder marked
  indexed is read from the keys `lra table` stored (results.RUN_INDEX: the committed runs, kept
  current by `lra table --check`); any other, its runs of this task and mixer alone."""
  from lra.report import results  # pandas: only when a dry run asks for costs
  lines = []
  for who, folder, indexed in folders:
    if not (folder / "runs").is_dir():
      continue
    runs = results.read_index(folder, *program[:2]) if indexed else None
    if runs is None:
      with warnings.catch_warnings():
        warnings.simplefilter("ignore", results.RunFileWarning)
        runs = results.load_runs(folder, task=program[0], mixer=program[1])
    runs = runs[runs["config_id"] == program[2]]
    for device, group in runs.groupby(runs["device"].fillna("?"), sort=True):
      rates = [r for r in group["steps_per_s"] if r and r == r]  # NaN: no log window yet
      if not rates:
        continue
      rate = statistics.median(rates)
      complete = group[(group["status"] == "complete") & (group["num_steps"] == steps)]
      walls = [w for w in complete["wall_time_s"] if w and w == w]
      cores = group["cpu_cores"].dropna().max() if "cpu_cores" in group else None
      where = ", ".join(group["run_dir"].head(3)) + (", ..." if len(group) > 3 else "")
      cost = (f"~{_duration(statistics.median(walls))} with evaluations" if walls else
              f"~{_duration(steps / rate)} of training, evaluations not counted")
      runs_of = f"{len(group)} run{'s' if len(group) > 1 else ''} of this config"
      lines.append(f"{_device(device, cores)}: {cost}, {rate:.2f} steps/s: {runs_of} in {who} "
                   f"({where}{'; the median' if len(group) > 1 else ''})")
  return lines


def _from_bench(config: ml_collections.ConfigDict, program: tuple[str, str, str],
                folders: Sequence[Path]) -> list[str]:
  """One line per `lra bench --epoch` record of this program and its batching (a record of
  another task, mixer or preset is passed over before its config is resolved)."""
  steps = config.train.num_steps
  batching = {"padding": config.data.padding, "quantum": config.data.pad_quantum,
              "bucketing": config.data.bucketing,
              "micro_batches": config.train.grad_accum_steps}
  lines = []
  for path in sorted({p for folder in folders for p in folder.glob("bench/*.json")}):
    try:
      records = json.loads(path.read_text())
    except (OSError, ValueError):
      continue
    for record in records if isinstance(records, list) else []:
      setup = record.get("setup") if isinstance(record, dict) else None
      if (not isinstance(setup, dict) or "modes" not in record
          or (setup.get("task"), setup.get("preset")) != (program[0], config.preset)):
        continue
      try:
        same = _program(resolve_config(setup["task"], setup["mixer"], setup["preset"],
                                       setup.get("overrides", []))) == program
      except (KeyError, ValueError):
        continue
      for mode in record["modes"] if same else ():
        # Records written before micro-batches were recorded ran one per step.
        recorded = {"micro_batches": 1, **(mode.get("batching") or {})}
        if recorded == batching and mode.get("epoch_s") and mode.get("steps"):
          rate = mode["steps"] / mode["epoch_s"]
          lines.append(f"{_device(setup.get('device'), setup.get('cpu_cores'))}: "
                       f"~{_duration(steps / rate)} of training, evaluations not counted, "
                       f"{rate:.2f} steps/s: `lra bench --epoch` record {_shown(path)} "
                       f"({mode['mode']} batching)")
  return lines


LEDGER_DEVICES = {"h200": "NVIDIA H200", "h100": "NVIDIA H100"}


def _from_ledger(config: ml_collections.ConfigDict, program: tuple[str, str, str],
                 path: Path | None) -> list[str]:
  """One line per GPU kind of the ledger's rows of this program (one row: seeds share it; a row
  of another task, mixer or preset is passed over before its command is resolved)."""
  if path is None or not path.is_file():
    return []
  from lra.report import ledger  # pylint: disable=import-outside-toplevel
  from lra.runs.command import run_config
  steps = config.train.num_steps
  for row in ledger.load(path):
    said = ledger.parsed(row)
    if ((said.task, said.preset) != (program[0], config.preset)
        or _program(run_config(ledger.run_args(row))) != program):
      continue
    lines = []
    for kind, cost in row["cost"].items():
      if cost and cost.get("steps_per_s"):
        rate, evals = cost["steps_per_s"], cost.get("eval_s", 0.0)
        lines.append(f"{LEDGER_DEVICES.get(kind, kind)}: ~{_duration(steps / rate + evals)} "
                     f"({_duration(steps / rate)} of training at {rate:g} steps/s, "
                     f"{_duration(evals)} of evaluations): {cost['source']} ({_shown(path)}, "
                     f"row {row['id']})")
    return lines
  return []


def costs(config: ml_collections.ConfigDict, overrides: Sequence[str], results_dir: Path,
          reference: dict[str, Any] | None = None) -> list[str]:
  """The dry run's cost lines: every known speed of this program, each with its device and
  source, then what measures one where none is known. `reference`: today's preset, where the
  caller has it."""
  from lra.report import results  # pylint: disable=import-outside-toplevel
  committed = results.committed_results_dir()
  run_folders = [("your results", Path(results_dir), False)] + (
      [("the repository's committed results", committed, True)] if committed else [])
  program = _program(config, reference)
  found = [*_from_runs(program, config.train.num_steps, run_folders),
           *_from_bench(config, program, [folder for _, folder, _ in run_folders]),
           *_from_ledger(config, program, committed / "ledger.json" if committed else None)]
  phase = ("objective", "spt.init_from", "spt.allow_partial")  # lra bench times classification
  bench = shlex.join(["lra", "bench", "--epoch", config.task, "--preset", config.preset,
                      "--mixers", config.get("mixer_source", {}).get("spec") or config.model.mixer,
                      *(f"--config.{o}" for o in overrides
                        if o.partition("=")[0].strip() not in phase)])
  head = f"cost of its {config.train.num_steps:,} steps of batch {config.train.batch_size}"
  hint = (f"`{bench}` times an epoch on this machine, and a run's progress line gives its ETA "
          "within its first 10 s of training")
  if not found:
    return [f"{head}: no measured speed of this config on any device; {hint}."]
  return [f"{head}, from the speeds known for the same config (any seed):",
          *(f"  {line}" for line in found),
          f"  any other device: no measured speed; {hint}."]


def batching_line(config: ml_collections.ConfigDict) -> str:
  """What the run's training steps and evaluations take: its padding and micro-batches."""
  d, b, k = config.data, config.train.batch_size, config.train.grad_accum_steps
  rows = f"{k} micro-batches of {b // k} rows and one update" if k > 1 else "one piece"
  if d.padding == "sorted":
    return (f"batching: each batch of {b} as the protocol draws it, its rows sorted by length in "
            f"{rows}, each padded to its own longest rounded up to {d.pad_quantum} (the same "
            "update as the whole batch); evaluation in length order, each batch padded so")
  what = ("padded to the task's length" if d.padding == "fixed" else
          f"padded to its longest example rounded up to {d.pad_quantum}")
  drawn = " from length buckets" if d.bucketing else ""
  return f"batching: each batch of {b}{drawn} {what}, in {rows}"


def describe(config: ml_collections.ConfigDict, overrides: Sequence[str],
             reference: dict[str, Any], *, results_dir: Path, run_dir: Path | None = None,
             data_dir: Path | None = None) -> str:
  """The dry run's text: run folder, data cache, then `key = value  source` per line. `config`:
  the command's, resolved once (a fine-tune's start recorded: lra.runs.start.resolve);
  `reference`: today's preset in its phase."""
  task, preset = config.task, config.preset
  named = _named_start(config, overrides)
  run_dir = Path(run_dir) if run_dir else default_run_dir(config, results_dir, reference)
  cache = data_cache_dir(config, data_dir or default_data_dir())
  missing = missing_data(config, data_dir)
  if (cache / "meta.json").exists():
    data = "prepared"
  elif missing is None:
    data = "missing: the run generates it first (seeded, no download)"
  else:
    data = "missing. " + missing
  rows = sources(config, reference)
  width = max(len(f"{k} = {v!r}") for k, v, _ in rows)
  # What `lra run` itself would refuse, in its words (a folder of another run, a changed file).
  from lra.runs import pack  # pylint: disable=import-outside-toplevel
  refused = pack.refusal(run_dir, config.to_dict(), reference)  # today's preset, resolved once
  folder = (f"{_run_folder_state(run_dir, verdict=False)}; `lra run` refuses it: it {refused}"
            if refused else _run_folder_state(run_dir))
  lines = [f"{task} x {config.model.mixer} (preset {preset}): dry run, nothing is trained or "
           "written.",
           f"run folder: {run_dir} ({folder})",
           f"data: {cache} ({data})", _input_line(config, cache),
           batching_line(config),
           *costs(config, overrides, results_dir, reference),
           f"config ({sum(s != DEFAULT for _, _, s in rows)} of {len(rows)} values set by the "
           "preset or the command line):"]
  lines += [f"  {f'{k} = {v!r}':<{width}}  {s}" for k, v, s in rows]
  at = next(i for i, line in enumerate(lines) if line.startswith("config ("))
  return "\n".join([*lines[:at], *_other_phase(config, overrides, run_dir, results_dir, named),
                    *lines[at:]])


def _input_line(config: ml_collections.ConfigDict, cache: Path) -> str:
  """What the model reads: its tokens (and the pixels they are made of), from the cache's length,
  or with no cache yet, the length the run's generator will make; else how the task's length
  becomes tokens."""
  from lra.models.build import input_words  # pylint: disable=import-outside-toplevel
  try:
    seq_len = int(json.loads((cache / "meta.json").read_text())["seq_len"])
  except (OSError, ValueError, KeyError):
    made = TASKS[config.task].generated_length if config.data.generate else None
    seq_len = made(**config.data.generator) if made else None
  if seq_len is not None:
    return f"input: {input_words(config, seq_len)}"
  patch = config.model.get("patch", 1)
  return ("input: the task's tokens" if patch == 1 else f"input: each {patch}x{patch} square "
          f"of pixels one token (the task's length / {patch ** 2})")


def _named_start(config: ml_collections.ConfigDict, overrides: Sequence[str]) -> bool:
  """Records in a fine-tune's config without one (its pretraining not there yet) the start the
  pretraining its own settings make would give, complete (as `lra sweep --spt` plans it); True
  when the start was so named rather than read."""
  if run_identity.phase(config.to_dict()) != "spt" or run_identity.start_of(config.to_dict()):
    return False
  pretrain = [*run_identity.for_phase("pretrain", overrides), "objective=denoise"]
  pretraining = resolve_config(config.task, config.get("mixer_source", {}).get("spec")
                               or config.model.mixer, config.preset, pretrain)
  start.write(config, start.of_pretraining(pretraining.to_dict()))
  return True


def _other_phase(config: ml_collections.ConfigDict, overrides: Sequence[str], run_dir: Path,
                 results_dir: Path, named: bool) -> list[str]:
  """Self-pretraining's other phase: for `lra pretrain`, the fine-tune that follows it (its
  folder, steps and cost); for a fine-tune, the pretraining run it starts from (`named`: the
  start was named from this command's settings, that folder not being there yet)."""
  phase = run_identity.phase(config.to_dict())
  if phase == "pretrain":
    mine = [o for o in run_identity.for_phase("spt", overrides)
            if o.partition("=")[0].strip() != "objective"]
    tune = resolve_config(config.task, config.get("mixer_source", {}).get("spec")
                          or config.model.mixer, config.preset,
                          [*mine, f"spt.init_from={run_dir}"])
    start.write(tune, start.of_pretraining(config.to_dict()))
    return [f"then its fine-tune: `lra run ... --init-from {run_dir}` into "
            f"{default_run_dir(tune, results_dir)}",
            *(f"  {line}" for line in costs(tune, mine, results_dir))]
  if phase == "spt":
    begun = Path(config.spt.init_from)
    recorded = config.spt.start
    loads = (f"its best checkpoint's encoder (step {recorded.step:,}"
             + ("" if recorded.complete else ", the pretraining unfinished") + ")"
             if not named else "its best checkpoint's encoder, as from the pretraining this "
             "command's settings make (none there yet)")
    return [f"starts from: the pretraining run {begun} ({_run_folder_state(begun, verdict=False)}"
            f"), {loads}, with a new classifier head"]
  return []
