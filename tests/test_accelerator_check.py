"""tools/accelerator_check.py: its pieces on tiny inputs, and the whole `--quick` check (slow)."""
import json
import sys
import time
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import accelerator_check as check  # noqa: E402  pylint: disable=wrong-import-position

TESTS = '''
import time
import pytest

@pytest.fixture
def broken():
  raise RuntimeError("no device")

def test_passes():
  pass

def test_fails():
  assert 1 == 2, "TF32 tolerance"

def test_errors(broken):
  pass

def test_skips():
  pytest.skip("needs a GPU")

def test_hangs():
  time.sleep(120)

def test_never_starts():
  pass
'''


def _ctx(tmp_path, tests=None):
  return types.SimpleNamespace(sizes={"tests": ["tests/test_mixer_cores.py"]}, work=tmp_path,
                               out=tmp_path, env={"platform": "cpu"}, quick=True,
                               children=check.Children(),
                               args=types.SimpleNamespace(tests=tests))


def test_test_outcomes_are_kept_by_name_when_time_runs_out(tmp_path):
  (tmp_path / "test_tiny.py").write_text(TESTS)
  # --tests picks the files, over the quick selection.
  ctx = _ctx(tmp_path, tests=str(tmp_path / "test_tiny.py"))
  began = time.monotonic()
  # 20 s: time for the inner pytest to start and run five tests on a busy CPU (tests in parallel).
  result = check.phase_tests(ctx, time.monotonic() + 20)
  assert time.monotonic() - began < 60  # stopped at the deadline, not after the 120 s hang
  assert result["status"] == "partial: stopped at its time limit"
  assert result["collected"] == 6
  assert result["counts"] == {"passed": 1, "skipped": 1, "failed": 1, "error": 1}
  failures = {f["id"].split("::")[1]: f for f in result["failures"]}
  assert failures["test_fails"]["outcome"] == "failed"
  assert "TF32 tolerance" in failures["test_fails"]["message"]
  assert failures["test_errors"]["outcome"] == "error"
  assert "no device" in failures["test_errors"]["message"]
  assert [t.split("::")[1] for t in result["running_at_stop"]] == ["test_hangs"]
  assert result["not_started"] == 1


def test_run_summary_leaves_the_compiling_first_rate_out(tmp_path):
  rows = [{"step": 50, "train/steps_per_s": 2.0}, {"step": 100, "train/steps_per_s": 50.0},
          {"step": 150, "train/steps_per_s": 60.0}, {"step": 150, "val/accuracy": 0.3,
                                                     "test/accuracy": 0.25},
          {"step": 200, "train/steps_per_s": 58.0}]
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  (tmp_path / "final.json").write_text(json.dumps({"status": "interrupted", "step": 201}))
  s = check.summarise_run(tmp_path)
  assert s["steps_per_s"] == 58.0 and s["last_step"] == 200 and s["final_step"] == 201
  assert s["evals"] == [{"step": 150, "val_accuracy": 0.3, "test_accuracy": 0.25}]
  assert check.summarise_run(tmp_path / "absent")["steps_per_s"] is None


def test_probe_flags_are_read_from_its_help(tmp_path, monkeypatch):
  old = "usage: probe [--model {dilated,recurrent,plain}] [--steps STEPS]"
  new = ("usage: probe [--model {dilated,recurrent,plain,resnet18}] [--time-budget-s S] "
         "[--quick]")
  assert check.probe_missing(old) == list(check.PROBE_FLAGS)
  assert check.probe_missing(new) == []
  monkeypatch.setattr(check, "probe_help", lambda: old)
  result = check.phase_probe(_ctx(tmp_path), time.monotonic() + 100)
  assert result["status"] == ("skipped: tools/pathfinder_probe.py has no --model resnet18, "
                              "--time-budget-s, --quick on this checkout")


def test_the_probe_data_is_generated_unless_given_or_quick():
  assert check.parse_args([]).pathfinder_generate == check.PATHFINDER_IMAGES
  assert check.parse_args(["--quick"]).pathfinder_generate == 0
  assert check.parse_args(["--pathfinder-cache", "pf"]).pathfinder_generate == 0
  assert check.parse_args(["--probe-args", "--generated pf"]).pathfinder_generate == 0
  assert check.parse_args(["--quick", "--pathfinder-generate", "400"]).pathfinder_generate == 400


def test_deadlines_share_the_budget_in_order():
  c = check.Check(check.parse_args(["--quick", "--budget-s", "480"]))
  ends = [c.deadline(p) - c.start for p in check.PHASES]
  assert ends == sorted(ends) and ends[0] == pytest.approx(0.2 * 480)
  assert ends[-1] == pytest.approx(480 - check.RESERVE_S)
  # Phases picked alone share the whole budget.
  c = check.Check(check.parse_args(["--quick", "--budget-s", "480", "--phases", "bench,probe"]))
  assert c.deadline("bench") - c.start == pytest.approx(480 * 0.3 / 0.45)
  assert c.deadline("probe") - c.start == pytest.approx(480 - check.RESERVE_S)


def test_report_shows_partial_phases_and_failing_names():
  report = {
      "date": "2026-11-26 03:00 UTC", "quick": True, "budget_s": 480, "wall_s": 300,
      "command": "python tools/accelerator_check.py --quick", "commit": "abc",
      "note": "Lent for 15 minutes.",
      "environment": {"platform": "gpu", "device_kind": "NVIDIA H200", "device_count": 1,
                      "memory_bytes": 140 * 2**30, "versions": {"jax": "0.11.2"}},
      "phases": {
          "tests": {"status": "partial: stopped at its time limit", "seconds": 96,
                    "command": "python -m pytest", "collected": 3,
                    "counts": {"passed": 1, "failed": 1, "error": 0, "skipped": 0},
                    "failures": [{"id": "tests/t.py::test_tf32", "outcome": "failed",
                                  "message": "assert 1e-3 < 1e-5"}],
                    "running_at_stop": ["tests/t.py::test_big"], "not_started": 0},
          "bench": {"status": "done", "seconds": 100, "grid": {
              "num_layers": 6, "dim": 256, "num_heads": 4, "batch_size": 32},
              "records": [{"mixer": "softmax", "seq_len": 4096, "status": "oom",
                           "oom_detail": "Out of memory while trying to allocate 96.0GiB"}]},
          "probe": {"status": "skipped: no Pathfinder data", "seconds": 0}}}
  md = check.render(report)
  assert "**A `--quick` run on gpu**" in md and "\nLent for 15 minutes.\n" in md
  assert "| gpu:NVIDIA H200 | 1 | 140.0 | - | - | 0.11.2 |" in md
  assert "## tests: partial: stopped at its time limit (96 s)" in md
  assert "| `tests/t.py::test_tf32` | failed | assert 1e-3 < 1e-5 |" in md
  assert "Running when time ran out: `tests/t.py::test_big`" in md
  assert "| softmax | - | 4096 | oom (Out of memory while trying to allocate 96.0GiB) |" in md
  assert "## probe: skipped: no Pathfinder data (0 s)" in md
  assert "## run" not in md


@pytest.mark.slow
def test_quick_check_writes_one_report_with_every_phase(tmp_path):
  # About 3 minutes alone on 2 CPU cores: a fresh process per bench record, a ListOps slice.
  assert check.main(["--quick", "--out", str(tmp_path), "--budget-s", "420",
                     "--pathfinder-generate", "400"]) == 0
  report = json.loads((tmp_path / "report.json").read_text())
  assert report["environment"]["platform"] == "cpu" and report["quick"]
  phases = report["phases"]
  assert list(phases) == list(check.PHASES)
  assert phases["tests"]["counts"]["passed"] >= 1 and not phases["tests"]["failures"]
  ok = [r for r in phases["bench"]["records"] if r["status"] == "ok"]
  assert ok and all(r["time_ms"] > 0 for r in ok)
  run = phases["run"]
  assert run["status"].startswith("done") and max(run["last_step"], run["final_step"] or 0) > 0
  probe = phases["probe"]  # on the host-made cache: "--quick" is not passed with a cache
  assert probe["status"].startswith(("done", "partial")) and probe["data_seconds"] > 0
  assert "--cache <tmp>/pathfinder_data/pathfinder" in probe["command"]
  assert (tmp_path / "report.md").read_text().startswith("# Accelerator check: cpu:cpu")
