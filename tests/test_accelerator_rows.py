"""tools/accelerator_rows.py with --quick: two ledger rows started, completed, packed and adopted
in one call (the second's data and steps made while the first trained); the next row resumed from
its committed archive, with the data and compiled steps of the earlier call."""
import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import accelerator_rows as rows  # noqa: E402  pylint: disable=wrong-import-position

from lra.report import ledger  # noqa: E402
from lra.runs import pack
from lra.cli import main as lra_main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def committed(tmp_path):
  """A results folder holding four of the real ledger's ListOps rows and nothing else."""
  results = tmp_path / "results"
  results.mkdir()
  doc = json.loads((ROOT / "results" / "ledger.json").read_text())
  doc["rows"] = [r for r in doc["rows"] if r["id"] in (
      "listops-latte-paper-seed0", "listops-latte-paper-seed1", "listops-latte-paper-seed2",
      "listops-softmax-paper-seed0")]
  (results / "ledger.json").write_text(json.dumps(doc))
  return results


@pytest.mark.slow  # the loan tools end to end (~1 min): before a loan, docs/accelerators.md
def test_rows_chain_pack_adopt_then_resume_the_next_from_its_archive(
    committed, tmp_path, step_clock, monkeypatch, capsys):
  work = tmp_path / "work"
  first, second, third, fourth = ledger.load(committed / "ledger.json")
  out = tmp_path / "out1"
  monkeypatch.setenv("HOME", str(tmp_path))  # the recorded command names no machine's folders
  assert rows.main(["--quick", "--out", str(out), "--results-dir", str(committed), "--work",
                    str(work), "--budget-s", "1200", "--max-rows", "2"]) == 0
  monkeypatch.delenv("HOME")
  report = json.loads((out / "rows.json").read_text())
  assert "--out ~/out1 --results-dir ~/results" in report["command"]
  one, two = report["rows"]
  assert one["row"] == first["id"] and one["step_before"] == 0
  assert one["status"] == "complete at step 60 of 60" and one["steps_per_s"] > 0
  data = one["phases"]["data"]
  assert data["status"] == "ready" and data["generate_s"] > 0 and data["prepare_s"] > 0
  # Each of the three is rounded to 0.1 s: the parts' sum may exceed the total by up to 0.15 s.
  assert data["generate_s"] + data["prepare_s"] <= data["seconds"] + 0.2
  assert one["phases"]["compile"]["exit_code"] == 0
  assert [a["file"] for a in one["archive"]] == ["listops-latte-paper_seed0.pack"]
  # The second row took the rest of the budget, its data (the same cache) and steps ready.
  assert two["row"] == second["id"] and two["step_before"] == 0
  assert two["status"] == "complete at step 60 of 60"
  assert two["phases"]["data"]["status"] == "ready (made for an earlier row)"
  assert two["phases"]["compile"]["exit_code"] == 0
  assert [a["file"] for a in two["archive"]] == ["listops-latte-paper_seed1.pack"]
  assert report["status"] == (f"{first['id']} complete at step 60 of 60; "
                              f"{second['id']} complete at step 60 of 60")
  text = (out / "rows.md").read_text()
  assert f"## {first['id']}: complete" in text and f"## {second['id']}: complete" in text

  assert rows.main(["--adopt", str(out), "--results-dir", str(committed)]) == 0
  for row in (first, second):
    row_dir = committed / row["run"]
    assert sorted(p.name for p in row_dir.iterdir()) == ["config.json", "final.json",
                                                         "metrics.jsonl", "run.pack"]
    assert json.loads((row_dir / "final.json").read_text())["step"] == 60
  assert ledger.first_unfinished([first, second, third, fourth], committed) == third

  # Row 3's committed state: a run of its quick command stopped at a step-based deadline (each
  # step 1 s, each evaluation of a split 3 s, each save 2 s), packed, its checkpoints not kept.
  step_clock()
  row_dir = committed / third["run"]
  args = ledger.run_args(third) + [f"--config.{o}" for o in rows.QUICK_OVERRIDES]
  assert lra_main([*args, "--quiet", "--data-dir", str(work / "data"), "--run-dir", str(row_dir),
                   "--stop-after", "55"]) == 130  # stops at step 33 today
  monkeypatch.undo()
  stopped = json.loads((row_dir / "final.json").read_text())
  assert 0 < stopped["step"] < 60
  pack.pack(row_dir, row_dir / ledger.ARCHIVE)
  shutil.rmtree(row_dir / "checkpoints")
  capsys.readouterr()

  # Too little left after row 3 for another: row 4's data and compile, begun beside row 3's
  # training, are stopped and the call ends with row 3 alone.
  monkeypatch.setattr(rows, "NEXT_ROW_MIN_S", 10**6)
  out = tmp_path / "out2"
  assert rows.main(["--quick", "--out", str(out), "--results-dir", str(committed), "--work",
                    str(work), "--budget-s", "1200"]) == 0
  report = json.loads((out / "rows.json").read_text())
  (only,) = report["rows"]
  assert only["row"] == third["id"] and only["step_before"] == stopped["step"]
  assert only["phases"]["state"]["from"].endswith(f"{third['run']}/run.pack")
  assert only["phases"]["data"]["status"] == "ready (made by an earlier call)"
  assert report["status"] == "complete at step 60 of 60"
  assert not (work / "results" / fourth["run"]).exists()


def test_a_finished_ledger_says_so(committed, tmp_path):
  for row in ledger.load(committed / "ledger.json"):
    (committed / row["run"]).mkdir(parents=True)
    (committed / row["run"] / "final.json").write_text(json.dumps({"status": "complete"}))
  out = tmp_path / "out"
  assert rows.main(["--quick", "--out", str(out), "--results-dir", str(committed), "--work",
                    str(tmp_path / "work")]) == 0
  assert json.loads((out / "rows.json").read_text())["status"] == (
      "every ledger row is complete: nothing to run")


def test_stopped_rows_are_reported_and_skipped_not_retried(committed, tmp_path):
  first, second, third, fourth = ledger.load(committed / "ledger.json")
  for row, final in ((first, {"status": "diverged", "step": 600, "num_steps": 75000}),
                     (second, {"status": "failed", "step": 0, "num_steps": 75000}),
                     (fourth, {"status": "complete"})):
    (committed / row["run"]).mkdir(parents=True)
    (committed / row["run"] / "final.json").write_text(json.dumps(final))
  # Row 3 diverged on this machine in an earlier call (a warm machine's .rows/ keeps it).
  work = tmp_path / "work"
  (work / "results" / third["run"]).mkdir(parents=True)
  (work / "results" / third["run"] / "final.json").write_text(json.dumps(
      {"status": "diverged", "step": 40, "num_steps": 75000}))
  out = tmp_path / "out"
  assert rows.main(["--quick", "--out", str(out), "--results-dir", str(committed), "--work",
                    str(work)]) == 0
  report = json.loads((out / "rows.json").read_text())
  assert report["status"] == "every ledger row is complete or stopped: nothing to run"
  assert [(s["row"], s["state"]) for s in report["skipped"]] == [
      (first["id"], "diverged (loss not finite) at step 600 of 75,000, before its first "
                    "evaluation"),
      (second["id"], "failed at step 0 of 75,000, before its first evaluation"),
      (third["id"], "diverged (loss not finite) at step 40 of 75,000, before its first "
                    "evaluation (on this machine, not yet adopted)")]
  text = (out / "rows.md").read_text()
  assert f"- {first['id']}: diverged (loss not finite) at step 600" in text
  assert "not retried" in text


def test_a_row_that_diverges_on_the_machine_is_recorded_by_adopting(committed, tmp_path,
                                                                    monkeypatch):
  first, second = ledger.load(committed / "ledger.json")[:2]
  # Not finite by the first log step, before the first checkpoint: nothing to pack, and still
  # the stop must reach the committed folder, or the next loan would run the row again.
  monkeypatch.setattr(rows, "QUICK_OVERRIDES", rows.QUICK_OVERRIDES + (
      "train.learning_rate=1e30", "train.grad_clip_norm=0.0", "train.log_every_steps=1"))
  out = tmp_path / "out"
  assert rows.main(["--quick", "--out", str(out), "--results-dir", str(committed), "--work",
                    str(tmp_path / "work"), "--max-rows", "1"]) == 0
  (one,) = json.loads((out / "rows.json").read_text())["rows"]
  assert one["status"].startswith("diverged (loss not finite) at step ")
  assert one["status"].endswith(": not retried by later loans once adopted")
  assert "no checkpoint" in one["phases"]["pack"]["skipped"]
  assert rows.main(["--adopt", str(out), "--results-dir", str(committed)]) == 0
  assert json.loads((committed / first["run"] / "final.json").read_text())["status"] == (
      "diverged")
  assert ledger.first_unfinished(ledger.load(committed / "ledger.json"), committed) == second


def test_adopting_keeps_the_committed_archive_until_the_new_one_is_in_place(committed, tmp_path,
                                                                            monkeypatch):
  first = ledger.load(committed / "ledger.json")[0]
  row_dir = committed / first["run"]
  row_dir.mkdir(parents=True)
  for name, final in (("config.json", {"task": "listops"}),
                      ("final.json", {"status": "complete", "step": 3})):
    (row_dir / name).write_text(json.dumps(final))
  (row_dir / "metrics.jsonl").write_text("old\n" * 10_000)
  monkeypatch.setattr(pack, "PART_BYTES", 20_000)
  old = {p.name: p.read_bytes() for p in pack.pack(row_dir, row_dir / ledger.ARCHIVE)}
  assert len(old) == 3
  # This call's archive: two parts.
  moved = tmp_path / "moved" / first["run"]
  shutil.copytree(row_dir, moved)
  (moved / "metrics.jsonl").write_text("new\n" * 4_000)
  out = tmp_path / "out"
  parts = pack.pack(moved, out / "row.pack")
  assert len(parts) == 2
  (out / "rows.json").write_text(json.dumps({"rows": [{"run": first["run"], "archive": [
      {"file": p.name, "bytes": p.stat().st_size} for p in parts]}]}))
  real_copy, calls = shutil.copyfile, []

  def full_disk(source, target):
    calls.append(target)
    if str(target).endswith(".pack.2") or str(target).endswith(".pack.2.tmp"):
      raise OSError(28, "No space left on device")
    return real_copy(source, target)
  monkeypatch.setattr(shutil, "copyfile", full_disk)
  with pytest.raises(OSError, match="No space left"):
    rows.adopt(out, committed)
  monkeypatch.setattr(shutil, "copyfile", real_copy)
  assert {p.name: p.read_bytes() for p in row_dir.glob("run.pack*")} == old
  rows.adopt(out, committed)
  assert sorted(p.name for p in row_dir.glob("run.pack*")) == ["run.pack.1", "run.pack.2"]
  assert (row_dir / "metrics.jsonl").read_text() == "new\n" * 4_000
