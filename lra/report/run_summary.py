"""What a run's final.json says, in words: the summary `lra run` prints (with a verdict for the
`synthetic` task: does the mixer mix?), and the one-phrase state that tables and `lra status` give
a run that is not complete.

final.json keeps the train loop's markers for "not yet": best step -1 and val accuracy -1 before the
first evaluation, steps/s 0 when no log window was timed. None of them is ever printed as a number.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lra.report.table_rules import decimals
from lra.runs import pack, run_identity, run_lock

# The `synthetic` task's pass mark, on test accuracy at the best val step: every built-in mixer
# that carries both ends to the CLS output reaches 100% in its 1,500 steps, those that do not stay
# at 24-58% (one end alone gives 25%); results/runs/synthetic/README.md. The slow
# test of tests/test_synthetic.py holds the built-in mixers to the same mark.
MIXES_AT = 0.95
# What the built-in mixers that pass reach on the committed paper runs (tests/test_synthetic.py
# checks it against them): sinkhorn 98.5%, every other one 100%.
BUILT_IN_MIXING = "98.5-100%"
# A run that ended so is stopped: the same command would end it the same way again (a loss that
# is not finite, an error), so the ledger and `lra sweep` report it and leave it, never rerun it.
STOPPED = ("diverged", "failed")


def evaluated(final: Mapping[str, Any]) -> bool:
  """Whether the run reached an evaluation (best_step is -1, val accuracy -1.0, before one)."""
  step = number(final.get("best_step"))
  return step is not None and step >= 0


def steps_per_s(final: Mapping[str, Any]) -> float | None:
  """The measured training speed, or None when no log window was timed (0.0 in final.json)."""
  rate = number(final.get("steps_per_s"))
  return rate if rate else None


def progress(final: Mapping[str, Any]) -> str:
  """"step 1,200 of 5,000"."""
  step, total = number(final.get("step")), number(final.get("num_steps"))
  text = f"step {_count(step)}" if step is not None else "no step"
  return text + (f" of {_count(total)}" if total is not None else "")


def stopped(final: Mapping[str, Any], run_dir: Path | None = None) -> bool:
  """Whether an unfinished run is stopped, resumable by its command: stopped sealed
  (`interrupted`), or killed with final.json still saying `running` and no live process holding
  `run_dir` (its lock gone or stale). Without `run_dir`, only `interrupted` is known stopped."""
  status = final.get("status")
  if status == "interrupted":
    return True
  return (status == "running" and run_dir is not None
          and not run_lock.RunDirLock(Path(run_dir), take=False).held())


def from_here(path: str | Path) -> Path:
  """A run folder as a command typed in the working folder names it: relative to it when under
  it, else absolute. Tables, `lra status` and the stop message all name a folder so, so the
  command each prints to resume a run is the same, and valid where `lra` runs."""
  path = Path(path)
  try:
    return path.resolve().relative_to(Path.cwd().resolve())
  except ValueError:
    return path.resolve()


def resume_text(run_dir: Path, shown: Path | None = None) -> str:
  """"`lra run ...` resumes it": the command that resumes a stopped run, from its config.json
  (lra.runs.pack.resume_command), naming the folder as `shown` (default: from_here(run_dir));
  "" where the folder cannot say. A run of an own mixer whose file has changed since cannot
  resume: the text says so, and gives the command of a new run instead."""
  from lra.runs import pack  # pylint: disable=import-outside-toplevel (JAX: only when needed)
  try:
    config = run_identity.read_config(Path(run_dir) / "config.json")
    changed = pack.mixer_changed(config)
    if changed:
      return pack.changed_mixer_text(config, changed)
    command = pack.resume_command(config, Path(shown or from_here(run_dir)))
  except (OSError, ValueError, KeyError):
    return ""
  return f"`{command}` resumes it" if command else ""


def state_text(final: Mapping[str, Any], run_dir: Path | None = None,
               shown: Path | None = None) -> str:
  """The state of a run that is not complete, as tables, `lra status` and the ledger name it:
  "in progress: step 1,200 of 5,000, best so far 35.10% test at the best val step 1,000" (or
  ", no evaluation yet"); "stopped at step 1,200 of 5,000, ..." for a run no process is running
  (`run_dir` given: with the command that resumes it, naming the folder as `shown` if given,
  else as from_here does);
  "diverged (loss not finite) at step 6 of 5,000, before its first evaluation"."""
  status = final.get("status") or "unknown"
  if status in ("interrupted", "running"):  # a killed run's final.json still says running
    halted = stopped(final, run_dir)
    text = f"{'stopped at' if halted else 'in progress:'} {progress(final)}"
    if not evaluated(final) or number(final.get("test_accuracy")) is None:
      text += ", no evaluation yet"
    else:
      text += (f", best so far {_pct(final.get('test_accuracy'))} test at the best val step "
               f"{_count(number(final['best_step']))}")
    resume = resume_text(run_dir, shown) if halted and run_dir is not None else ""
    return text + (f"; {resume}" if resume else "")
  where = "diverged (loss not finite)" if status == "diverged" else status
  part = str(final.get("stop_reason") or "").split(":", 1)[0]  # train._non_finite_cause's
  if status == "diverged" and part in ("forward pass", "backward pass"):
    where = f"not finite in its {part} from the initial parameters (not training diverging),"
  text = f"{where} at {progress(final)}"
  return text if evaluated(final) else text + ", before its first evaluation"


def _pct(x: Any) -> str:
  x = number(x)
  return "none" if x is None else f"{decimals(100 * x)}%"


def number(x: Any) -> float | None:
  """A number from final.json or a table row; None for null and for NaN (pandas' missing)."""
  if x is None or isinstance(x, bool):
    return None
  try:
    x = float(x)
  except (TypeError, ValueError):
    return None
  return None if math.isnan(x) else x


def _count(x: float) -> str:
  return f"{int(x):,}"


def result_lines(result: Mapping[str, Any]) -> list[str]:
  """The summary `lra run` prints at the end of a run (any status)."""
  status = result["status"]
  head = f"{result['task']} x {result['mixer']} ({result['preset']}): "
  plain = status in ("complete", "interrupted")  # the others say what happened (state_text)
  lines = [head + (f"{status} at {progress(result)}" if plain else
                   state_text(result).removesuffix(", before its first evaluation"))]
  denoising = result.get("objective") == "denoise"
  if evaluated(result) and denoising:
    lit = (f" ({_pct(result['val_lit_accuracy'])} of the lit ones, not background)"
           if number(result.get("val_lit_accuracy")) is not None else "")
    lines.append(f"  held out (val): {_pct(result.get('val_accuracy'))} of hidden values "
                 f"predicted{lit}, loss {number(result.get('val_loss')) or 0:.4f} per hidden "
                 f"token, at the best val step {_count(result['best_step'])}")
  elif evaluated(result):
    best_step = number(result.get("best_test_step"))  # absent from older final.json files
    best = (f"; best test {_pct(result.get('best_test_accuracy'))} (step {_count(best_step)})"
            if best_step is not None and best_step >= 0 else "")
    last = ("; last step " + _pct(result.get("test_accuracy_last"))
            if number(result.get("test_accuracy_last")) is not None else "")
    lines.append(f"  test accuracy {_pct(result.get('test_accuracy'))} at the best val step "
                 f"{_count(result['best_step'])} (val {_pct(result.get('val_accuracy'))})"
                 f"{best}{last}")
  else:
    lines.append("  no evaluation yet: no accuracy to report")
  if not denoising:
    lines.append(f"  majority class {_pct(result.get('majority_accuracy'))}, chance "
                 f"{_pct(result.get('chance_accuracy'))}")
  cost = []
  if number(result.get("num_params")) is not None:
    cost.append(f"{_count(result['num_params'])} parameters")
  rate = steps_per_s(result)
  if rate is not None:
    cost.append(f"{rate:.1f} steps/s")
  wall = number(result.get("wall_time_s"))
  cost.append(f"{wall or 0:.0f}s on {result.get('device')}")
  lines.append("  " + ", ".join(cost))
  if status == "diverged" and result.get("stop_reason"):  # why: the model, or its training
    lines.append(f"  why: {result['stop_reason']}")
  if status == "interrupted":
    resume = resume_text(Path(result["run_dir"])) if result.get("run_dir") else ""
    lines.append("  saved: " + (resume.replace(" resumes it", " resumes it from this step")
                                if resume else "the same command resumes it from this step"))
  if denoising and result.get("run_dir"):
    command = _fine_tune_command(Path(result["run_dir"]), partial=status != "complete")
    if command:
      lines.append(f"  fine-tune: {command}")
  verdict = synthetic_verdict(result)
  if verdict:
    lines.append("  " + verdict)
  return lines


def _fine_tune_command(run_dir: Path, *, partial: bool) -> str | None:
  """The command that fine-tunes from the pretraining run in `run_dir` (its config.json)."""
  config_path = run_dir / "config.json"
  if not config_path.is_file():
    return None
  return pack.fine_tune_command(run_identity.read_config(config_path), run_dir, partial=partial)


def synthetic_verdict(result: Mapping[str, Any]) -> str | None:
  """Whether a complete `synthetic` run's mixer mixes (test accuracy at the best val step at or
  above MIXES_AT), in one line; None for another task, a run that is not complete, or a
  self-pretraining run (it classifies nothing)."""
  if (result.get("task") != "synthetic" or result.get("status") != "complete"
      or result.get("objective") == "denoise"):
    return None
  if result.get("preset") == "smoke":
    return ("verdict: none from the smoke preset (a few steps: it checks that a run runs); "
            "`lra run synthetic MIXER` trains the 1,500 steps the verdict needs")
  accuracy = number(result.get("test_accuracy"))
  if accuracy is None:
    return None
  score, mark = f"{_pct(accuracy)} test at the best val step", f"{100 * MIXES_AT:.0f}%"
  built_in = f"the built-in mixers that mix reach {BUILT_IN_MIXING}"
  if accuracy >= MIXES_AT:
    return f"verdict: mixes: {score}, at or above the pass mark of {mark} ({built_in})"
  chance = number(result.get("chance_accuracy"))
  # num_values^2 classes: one end alone narrows the class to num_values of them, sqrt(chance).
  one_end = (f"one end alone gives {_pct(math.sqrt(chance))}, chance {_pct(chance)}; "
             if chance else "")
  return (f"verdict: does not mix in {_count(number(result.get('step')) or 0)} steps: {score}, "
          f"under the pass mark of {mark} ({one_end}{built_in})")
