"""`lra list`: the tasks, mixers (with where their defaults depart from LRA's rows) and presets."""
from __future__ import annotations

import argparse

from lra.cli.common import add_command
from lra.configs.common import CPU_PRESETS, OWN_ARCHITECTURE_PRESETS, PRESETS, PUBLISHED_PRESETS
from lra.models.mixers import MIXERS, describe, entry_points
from lra.report import timings
from lra.tasks import TASKS


def add_parser(commands) -> None:
  parser = add_command(commands, "list", "tasks, mixers and presets (with the tasks each applies "
                       "to)")
  parser.set_defaults(handler=main)


def main(args: argparse.Namespace, overrides: list[str]) -> int:
  print_list()
  return 0


def print_list() -> None:
  print("Tasks:")
  for name, task in TASKS.items():
    print(f"  {name:<16} {task.description}")
  print(f"Mixers ({len(MIXERS)} built in):")
  departures = lra_row_departures()
  for name in MIXERS:
    print(f"  {name:<16} {describe(name)}")
    if departures.get(name):
      print(f"  {'':<16} defaults differ from its LRA row (--preset lra runs the row's): "
            f"{', '.join(departures[name])}")
  for name, ep in entry_points().items():  # installed packages' mixers (lra.mixers)
    print(f"  {name:<16} {ep.value} (installed{f' from {ep.dist.name}' if ep.dist else ''})")
  print("Presets (lra run TASK MIXER --preset P; --dry-run shows what one sets):")
  for preset in PRESETS + CPU_PRESETS + PUBLISHED_PRESETS:
    print(f"  {preset:<16} {PRESET_DESCRIPTIONS[preset]} [{', '.join(_tasks_with(preset))}]")


def lra_row_departures() -> dict[str, list[str]]:
  """Per mixer with a row of LRA's Table 1 in the tables, its default settings where they differ
  from the LRA code's that made the row (as the `lra` preset of ListOps sets them), as
  "key=default (LRA: value)"; docs/mixers.md says why each differs."""
  from lra.runs.config_loading import resolve_config
  from lra.configs.common import mixer_configs
  from lra.report.tables import load_published
  lra_rows = {row["mixer"] for row in load_published() if row["mixer"]
              and row["source"].startswith("LRA paper Table 1")}
  defaults, found = mixer_configs(), {}
  for mixer in sorted(lra_rows):
    lra = resolve_config("listops", mixer, "lra").mixers[mixer]
    found[mixer] = [f"{key}={value} (LRA: {lra[key]})" for key, value in
                    sorted(defaults[mixer].items()) if lra[key] != value]
  return found


# One line each for `lra list`; docs/protocol.md says where every value comes from. The times are
# the measured record's (lra.report.timings), which the README and docs quote too.
PRESET_DESCRIPTIONS = {
    "paper": "the default: the Latte paper's settings (accelerator-sized, 6 layers; ListOps with "
             f"Latte: {timings.text('paper_h200')})",
    "latte_code": "the Latte authors' code where it departs from the paper",
    "lra": "the original LRA code's settings",
    "smoke": "seconds: a few steps of a tiny model (checks that it runs, not that it learns)",
    "demo": "minutes on a CPU: a small model on small generated data (ListOps with Latte: "
            f"{timings.text('demo')})",
    "laptop": "the LRA task's own data at full length with a small model, trained on a CPU: "
              f"ListOps {timings.text('listops_laptop')}; Pathfinder "
              f"{timings.text('pathfinder_laptop')}",
    "published": "S5's and Mega-Chunk's own published LRA runs: their blocks and optimizers",
    "laptop_published": "S5's or Mega-Chunk's own architecture on the laptop's data and budget",
    "squares": "NOT LRA's task: Pathfinder's easy set as 4x4 pixel squares (64 tokens), where "
               f"mixers learn on a CPU: {timings.text('squares')}",
    "squares_published": "S5's or Mega-Chunk's own block on the squares' data, size and budget",
}


def _tasks_with(preset: str) -> list[str]:
  """The tasks whose config accepts this preset."""
  from lra.runs.config_loading import load_config
  found = []
  mixer = "s5" if preset in OWN_ARCHITECTURE_PRESETS else "latte"  # they take only s5 and mega
  for task in TASKS:
    try:
      load_config(task, preset, mixer)
    except ValueError:
      continue
    found.append(task)
  return found


