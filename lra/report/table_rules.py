"""What the rows of `lra table` mean, shared by the rows (lra.report.tables) and their Markdown
(lra.report.table_markdown): the LRA tasks, the three statistics, the chance margin and the preset
groups.
"""
from __future__ import annotations

import decimal

from lra.configs.common import CPU_PRESETS  # the one list of CPU presets, re-exported here

LRA_TASKS = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")
AVG_TASKS = LRA_TASKS[:5]  # the LRA average leaves Path-X out (every baseline FAILs it)
TASK_TITLES = {"listops": "ListOps", "text": "Text", "retrieval": "Retrieval", "image": "Image",
               "pathfinder": "Pathfinder", "pathx": "Path-X", "avg": "Avg"}
# Preset groups, each its own table section: the papers' protocols (Δ to the published rows),
# the LRA task at full length with small models on a CPU (published numbers beside, no Δ: other
# models), and the small sanity-check presets.
PROTOCOL_PRESETS = ("paper", "lra", "published")
# Whose experiment a row is: yours (the runs of your results folder), the repository's committed
# runs (the committed tables' own rows, and beside yours: each summarised apart, so a committed
# seed never enters your mean), or a paper's.
YOURS, COMMITTED, PUBLISHED = "yours", "committed", "published"
RUN_SOURCES = (YOURS, COMMITTED)
# statistic name -> (the column holding ours, what it is)
STATISTICS = {
    "best_test": ("best_test_accuracy", "best test accuracy over evaluations (the Latte papers' "
                  "statistic)"),
    "last": ("test_accuracy_last", "test accuracy after the last step (the LRA code's statistic)"),
    "best_val": ("test_accuracy", "test accuracy at the best validation step (the model chosen "
                 "without the test set)"),
}
CHANCE_MARGIN = 1.0  # points: a mean this close to chance/majority has not learned the task


def at_chance(acc: float | None, chance: float | None, majority: float | None = None) -> bool:
  """Whether an accuracy (in %) is within CHANCE_MARGIN of chance or of the majority class: the
  run has not learned the task (‡ in the tables)."""
  floor = max(x for x in (chance, majority, 0.0) if x is not None)
  return acc is not None and acc <= floor + CHANCE_MARGIN


def decimals(value: float, digits: int = 2) -> str:
  """The one rounding rule of every figure the reports print: half away from zero, on the value
  rounded to 9 places first, so 56.675 and 0.56675 * 100 (56.674999...) both print 56.68 in the
  tables, the status and `lra status` alike."""
  exact = decimal.Decimal(repr(round(float(value), 9)))
  return str(exact.quantize(decimal.Decimal(1).scaleb(-digits), rounding=decimal.ROUND_HALF_UP))


def group(preset: str) -> str:
  """"protocol", "cpu" or "small": the table section a preset's runs belong to."""
  preset = preset.split(" ")[0]
  return ("protocol" if preset in PROTOCOL_PRESETS else "cpu" if preset in CPU_PRESETS
          else "small")
