"""tools/pathfinder_study.py lists the Pathfinder study's runs by command: each committed run folder
must hold what its listed command runs, or the study's table would describe other runs."""
import json
import platform
import sys
from pathlib import Path

import pytest

from lra import cli
from lra.run_identity import flatten

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import pathfinder_study as study  # noqa: E402  pylint: disable=wrong-import-position


@pytest.mark.parametrize("run", study.STUDY, ids=lambda run: run.name)
def test_each_listed_command_is_what_its_committed_run_ran(run):
  saved_path = study.OUT / run.name / "config.json"
  assert saved_path.exists(), f"{run.name} is listed but has no committed run folder"
  saved = json.loads(saved_path.read_text())
  resolved = cli.run_config(run.command()[1:]).to_dict()
  # The run's own mixer and every shared section; other mixers' defaults may have moved since
  # (no run of this one reads them), and keys added since are absent from the saved file.
  def read(config: dict) -> dict:
    return flatten({k: v for k, v in config.items() if k != "mixers"}
                   | {"mixers": {run.mixer: config["mixers"][run.mixer]}})
  want, got = read(saved), read(resolved)
  differ = {k: (v, got.get(k, "<absent>")) for k, v in want.items() if k not in got or got[k] != v}
  assert not differ, f"{run.name}: saved vs the listed command's config: {differ}"


def test_a_killed_runs_status_reads_stopped(tmp_path):
  # The lock a killed run leaves: a pid above Linux's maximum (2^22), on this host.
  (tmp_path / "lock").write_text(json.dumps({"pid": 2 ** 22 + 7, "host": platform.node(),
                                             "started": "2026-11-27T00:00:00+00:00"}))
  assert study.status_of({"status": "running"}, tmp_path) == "stopped"
  assert study.status_of({"status": "complete"}, tmp_path) == "complete"
