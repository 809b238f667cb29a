"""docs/protocol.md lists every value of two documented commands with its source; the configs and
the page must agree."""
import re
from pathlib import Path

import pytest

from lra.runs.config_loading import resolve_config
from lra.runs.run_identity import flatten

ROOT = Path(__file__).resolve().parents[1]


def _documented() -> dict[str, list[str]]:
  text = (ROOT / "docs" / "protocol.md").read_text()
  section = text.split("## Every value of two documented commands")[1].split("\n## ")[0]
  rows = {}
  for line in section.splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) == 3 and re.fullmatch(r"[a-z0-9_.]+", cells[0]) and cells[0] != "key":
      rows[cells[0]] = [v.strip() for v in cells[1].split(" / ")]
  return rows


@pytest.mark.parametrize("mixer", ["latte", "latte_rglru_swa"])
def test_every_value_of_the_paper_preset_is_documented(mixer):
  documented = _documented()
  flat = flatten(resolve_config("listops", mixer, "paper").to_dict())
  own = {k: v for k, v in flat.items()
         if not k.startswith("mixers.") or k.startswith(f"mixers.{mixer}.")}
  missing = sorted(set(own) - set(documented))
  assert not missing, f"docs/protocol.md lacks {missing}"
  index = 0 if mixer == "latte" else -1  # "a / b" cells: the first for latte, the last for swa
  wrong = {k: (str(v), documented[k]) for k, v in own.items()
           if str(v) != documented[k][index if len(documented[k]) > 1 else 0]}
  assert not wrong, f"docs/protocol.md disagrees with the config: {wrong}"
