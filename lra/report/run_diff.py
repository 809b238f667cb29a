"""`lra diff RUN_A RUN_B`: what differs between two runs, so "why is my number different" is one
command: config values, the data they read, the code commit, package versions, the device, and
the scores they reached.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lra import errors
from lra.report.table_rules import decimals
from lra.runs.run_identity import as_trained, flatten

# What a row of the diff is about -> the final.json keys it compares.
FINAL_SECTIONS = {
    "data": ("data",),
    "code": ("git_sha",),
    "versions": ("versions", "python"),
    "device": ("device", "num_devices", "num_processes", "host", "dtype", "matmul_precision",
               "execution_path"),
    "scores": ("status", "step", "best_step", "val_accuracy", "test_accuracy",
               "best_test_accuracy", "test_accuracy_last", "steps_per_s", "wall_time_s"),
}


def _read(run_dir: Path, name: str) -> dict[str, Any]:
  path = Path(run_dir) / name
  if not path.exists():
    return {}
  try:
    return json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise errors.BadValue(f"{path}: not valid JSON ({e}).") from None


def diff_runs(run_a: Path, run_b: Path) -> list[tuple[str, str, Any, Any]]:
  """Rows (section, key, value in A, value in B) where the two runs differ, by section; of the
  mixer settings, only those of the mixers the two runs use."""
  for run_dir in (run_a, run_b):
    if not (Path(run_dir) / "config.json").exists():
      raise errors.NotFound(f"{run_dir} is not a run directory (no config.json).")
  rows = []
  missing = "(absent)"
  configs = [flatten(as_trained(_read(r, "config.json"))) for r in (run_a, run_b)]
  # Other mixers' settings ride along in every config.json but play no part in either run.
  used = {f"mixers.{c.get('model.mixer')}." for c in configs}
  for key in sorted(k for k in configs[0].keys() | configs[1].keys()
                    if not k.startswith("mixers.") or k.startswith(tuple(used))):
    a, b = (c.get(key, missing) for c in configs)
    if a != b:
      rows.append(("config", key, a, b))
  finals = [_read(r, "final.json") for r in (run_a, run_b)]
  for section, keys in FINAL_SECTIONS.items():
    flats = [flatten({k: f[k] for k in keys if k in f}) for f in finals]
    for key in sorted(flats[0].keys() | flats[1].keys()):
      a, b = (f.get(key, missing) for f in flats)
      if a != b:
        rows.append((section, key, a, b))
  return rows


def format_diff(rows: list[tuple[str, str, Any, Any]], run_a: Path, run_b: Path) -> str:
  if not rows:
    return f"{run_a} and {run_b}: no differences in config, data, code, versions, device or scores."
  width = max(len(f"{s} {k}") for s, k, _, _ in rows)
  lines = [f"A = {run_a}", f"B = {run_b}", ""]
  lines += [f"{f'{s} {k}':<{width}}  A: {_value(k, a)}   B: {_value(k, b)}"
            for s, k, a, b in rows]
  return "\n".join(lines)


def _value(key: str, value: Any) -> str:
  """A value as the reports print it: accuracies in % (two decimals, the one rounding rule),
  other measured numbers with four significant digits, settings as they are written."""
  if isinstance(value, bool) or not isinstance(value, float):
    return str(value)
  if "accuracy" in key:
    return f"{decimals(100 * value)}%"
  return f"{value:.4g}"
