"""tools/accelerator_rows.py with --quick: a ledger row started, packed and adopted; the next row
resumed from its committed archive, with the data and compiled steps of the earlier call."""
import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import accelerator_rows as rows  # noqa: E402  pylint: disable=wrong-import-position

from lra import ledger, pack  # noqa: E402
from lra.cli import main as lra_main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def committed(tmp_path):
  """A results folder holding the real ledger's first two rows and nothing else."""
  results = tmp_path / "results"
  results.mkdir()
  doc = json.loads((ROOT / "results" / "ledger.json").read_text())
  doc["rows"] = [r for r in doc["rows"] if r["id"] in ("listops-latte-paper-seed0",
                                                       "listops-latte-paper-seed1")]
  (results / "ledger.json").write_text(json.dumps(doc))
  return results


def test_rows_start_pack_adopt_then_resume_the_next_from_its_archive(
    committed, tmp_path, step_clock, monkeypatch, capsys):
  work = tmp_path / "work"
  first, second = ledger.load(committed / "ledger.json")
  out = tmp_path / "out1"
  assert rows.main(["--quick", "--out", str(out), "--results-dir", str(committed), "--work",
                    str(work), "--budget-s", "1200"]) == 0
  report = json.loads((out / "rows.json").read_text())
  assert report["row"] == first["id"] and report["step_before"] == 0
  assert report["status"] == "complete at step 60 of 60" and report["steps_per_s"] > 0
  data = report["phases"]["data"]
  assert data["status"] == "ready" and data["generate_s"] > 0 and data["prepare_s"] > 0
  # Each of the three is rounded to 0.1 s: the parts' sum may exceed the total by up to 0.15 s.
  assert data["generate_s"] + data["prepare_s"] <= data["seconds"] + 0.2
  assert report["phases"]["compile"]["exit_code"] == 0
  assert [a["file"] for a in report["archive"]] == ["listops-latte-paper_seed0.pack"]
  assert "Row: listops-latte-paper-seed0" in (out / "rows.md").read_text()

  assert rows.main(["--adopt", str(out), "--results-dir", str(committed)]) == 0
  row_dir = committed / first["run"]
  assert sorted(p.name for p in row_dir.iterdir()) == ["config.json", "final.json",
                                                       "metrics.jsonl", "run.pack"]
  assert json.loads((row_dir / "final.json").read_text())["step"] == 60
  assert ledger.first_unfinished([first, second], committed) == second

  # Row 2's committed state: a run of its quick command stopped at a step-based deadline (each
  # step 1 s, each evaluation of a split 3 s, each save 2 s), packed, its checkpoints not kept.
  step_clock()
  row_dir = committed / second["run"]
  args = ledger.run_args(second) + [f"--config.{o}" for o in rows.QUICK_OVERRIDES]
  assert lra_main([*args, "--quiet", "--data-dir", str(work / "data"), "--run-dir", str(row_dir),
                   "--stop-after", "55"]) == 130  # stops at step 33 today
  monkeypatch.undo()
  stopped = json.loads((row_dir / "final.json").read_text())
  assert 0 < stopped["step"] < 60
  pack.pack(row_dir, row_dir / ledger.ARCHIVE)
  shutil.rmtree(row_dir / "checkpoints")
  capsys.readouterr()

  out = tmp_path / "out2"
  assert rows.main(["--quick", "--out", str(out), "--results-dir", str(committed), "--work",
                    str(work), "--budget-s", "1200"]) == 0
  report = json.loads((out / "rows.json").read_text())
  assert report["row"] == second["id"] and report["step_before"] == stopped["step"]
  assert report["phases"]["state"]["from"].endswith(f"{second['run']}/run.pack")
  assert report["phases"]["data"]["status"] == "ready (made by an earlier call)"
  assert report["status"] == "complete at step 60 of 60"


def test_a_finished_ledger_says_so(committed, tmp_path):
  for row in ledger.load(committed / "ledger.json"):
    (committed / row["run"]).mkdir(parents=True)
    (committed / row["run"] / "final.json").write_text(json.dumps({"status": "complete"}))
  out = tmp_path / "out"
  assert rows.main(["--quick", "--out", str(out), "--results-dir", str(committed), "--work",
                    str(tmp_path / "work")]) == 0
  assert json.loads((out / "rows.json").read_text())["status"] == (
      "every ledger row is complete: nothing to run")
