"""The published LRA numbers (lra/reference/published_lra.csv): read and checked once, for the
tables (lra.report.tables), their Markdown (lra.report.table_markdown) and `lra status`."""
from __future__ import annotations

import csv
from pathlib import Path

from lra import errors
from lra.report.table_rules import LRA_TASKS

PUBLISHED_STATISTICS = ("best_test", "last", "unstated")
REFERENCE_CSV = Path(__file__).resolve().parents[1] / "reference" / "published_lra.csv"


def load_published(path: Path = REFERENCE_CSV) -> list[dict[str, str]]:
  """Rows of the published-results CSV (accuracies in %, 'FAIL' or '' where there is none)."""
  with open(path, newline="") as f:
    rows = list(csv.DictReader(f))
  expected = {"model", "mixer", "settings", "statistic", *LRA_TASKS, "source"}
  if not rows or not expected <= set(rows[0]):
    raise errors.BadValue(f"{path}: expected columns {sorted(expected)}, found "
                          f"{sorted(rows[0]) if rows else 'no rows'}")
  for line, row in enumerate(rows, start=2):
    if row["statistic"] not in PUBLISHED_STATISTICS:
      raise errors.BadValue(f"{path}:{line}: statistic is '{row['statistic']}', expected one of "
                            f"{', '.join(PUBLISHED_STATISTICS)}")
    for task in LRA_TASKS:
      if row[task] not in ("", "FAIL"):
        try:
          float(row[task])
        except ValueError:
          raise errors.BadValue(f"{path}:{line}: {task} is '{row[task]}', expected a percentage, "
                                "FAIL or empty") from None
  return rows
