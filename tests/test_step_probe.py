"""tools/step_probe.py: its trace summary and decisions on known inputs, and the whole probe with
--quick on the CPU as tools/accelerator_check.py's `steps` phase."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import accelerator_check as check  # noqa: E402  pylint: disable=wrong-import-position
import step_probe as probe  # noqa: E402  pylint: disable=wrong-import-position


def test_trace_summary_counts_overlapping_kernels_once(monkeypatch, tmp_path):
  # Two steps: kernels at 0-10 and 5-15 ns overlap (a second stream), then 30-40 after a gap.
  kernels = [("fusion.1", 0.0, 10.0), ("gemm", 5.0, 10.0), ("fusion.1", 30.0, 10.0)]
  monkeypatch.setattr(probe, "_events", lambda _: (kernels, "/device:GPU:0, 2 stream(s)"))
  summary = probe.summarise_trace(tmp_path, steps=2)
  assert summary["busy_percent"] == pytest.approx(100 * 25 / 40)
  assert summary["kernels_per_step"] == 1.5
  assert [k["name"] for k in summary["top"]] == ["fusion.1", "gemm"]
  assert summary["top"][0]["calls_per_step"] == 1.0
  assert summary["top"][0]["percent"] == pytest.approx(100 * 20 / 30)
  monkeypatch.setattr(probe, "_events", lambda _: ([], "no xplane.pb written"))
  assert probe.summarise_trace(tmp_path, steps=2)["busy_percent"] is None


def _rates(**rates):
  return [{"variant": name, "status": "ok", "steps_per_s": rate} for name, rate in rates.items()]


def test_decisions_flip_the_generator_only_beyond_the_drift():
  lines = probe.decide(_rates(baseline=50.0, unsafe_rbg=60.0, rbg=52.0, bf16=70.0, dropout0=65.0,
                              baseline_again=51.0))
  assert "`unsafe_rbg` is 20.0% faster than threefry" in lines[1]
  assert 'PAPER_DROPOUT_BITS = "unsafe_rbg"' in lines[1]
  assert "+30.0%" in lines[2] and "bf16: +40.0%" in lines[3]
  # A gain inside the drift between the two baselines is noise.
  lines = probe.decide(_rates(baseline=50.0, unsafe_rbg=52.0, baseline_again=52.5))
  assert lines[1] == "Dropout generator: no gain beyond noise; PAPER_DROPOUT_BITS stays threefry."
  assert probe.decide([{"variant": "baseline", "status": "failed: X"}]) == [
      "No baseline timing: nothing to decide."]


def test_sorted_micro_batches_are_held_against_the_cpus_ratio_and_k_follows_the_fastest():
  cpu = probe.cpu_sorted_ratio()  # read from the committed CPU record
  lines = probe.decide(_rates(baseline=50.0, sorted_k4=50.0 * cpu * 1.1, sorted_k2=55.0,
                              sorted_k8=50.0 * cpu * 1.1 * 1.2, baseline_again=50.0))
  assert f"k=4 {cpu * 1.1:.2f}x" in lines[-3] and f"the CPU's k=4 ratio was {cpu:.2f}x" in lines[-3]
  assert lines[-2] == "The k=4 ratio is +10% off the CPU's: within 15%."
  assert "k=8 is 20.0% faster than k=4" in lines[-1] and "SORTED_MICRO_BATCHES = 8" in lines[-1]
  lines = probe.decide(_rates(baseline=50.0, sorted_k4=50.0 * cpu * 0.8, baseline_again=50.0))
  assert lines[-1].startswith("The k=4 ratio is -20% off the CPU's: more than 15%")
  assert not any("Sorted" in line for line in probe.decide(_rates(baseline=50.0)))


@pytest.mark.slow  # the loan tools end to end (~1 min): before a loan, docs/accelerators.md
def test_quick_probe_runs_every_variant_as_a_phase_of_the_check(tmp_path):
  assert check.main(["--quick", "--phases", "steps", "--out", str(tmp_path),
                     "--budget-s", "900"]) == 0
  report = json.loads((tmp_path / "step_probe.json").read_text())
  assert [v["variant"] for v in report["variants"]] == [v for v, _ in probe.VARIANTS]
  for v in report["variants"]:
    assert v["status"] == "ok", v
    assert v["steps_per_s"] > 0 and v["flops"] > 0 and v["bytes_accessed"] > 0
    assert v["tb_per_s"] > 0 and v["compile_s"] > 0
    trace = v["trace"]
    assert trace["source"].startswith("no device plane (a CPU)"), trace
    assert trace["kernels_per_step"] > 0 and 0 < trace["busy_percent"] <= 100
  by_name = {v["variant"]: v for v in report["variants"]}
  assert by_name["unsafe_rbg"]["dropout_bits"] == "unsafe_rbg"
  assert by_name["bf16"]["dtype"] == "bfloat16" and by_name["dropout0"]["dropout"] == 0.0
  md = (tmp_path / "step_probe.md").read_text()
  assert "| variant | status | compile s | steps/s |" in md and "## What it decides" in md
  checked = json.loads((tmp_path / "report.json").read_text())
  assert list(checked["phases"]) == ["steps"] and checked["phases"]["steps"]["status"] == "done"
  assert "## steps: done" in (tmp_path / "report.md").read_text()


@pytest.mark.slow  # twenty tiny isolated records (~2 min): before a loan, docs/accelerators.md
def test_quick_probe_carries_the_lra_table_to_the_device(tmp_path):
  assert probe.main(["--quick", "--variants", "baseline", "--lra-table", "--out", str(tmp_path),
                     "--budget-s", "900"]) == 0
  report = json.loads((tmp_path / "lra_table.json").read_text())
  from lra.bench import lra_table  # pylint: disable=import-outside-toplevel
  assert {(r["mixer"], r["seq_len"]) for r in report["records"]} == {
      (m, t) for m in lra_table.MIXERS for t in (128, 256)}
  assert all(r["status"] == "ok" for r in report["records"]), [
      (r["mixer"], r["status"]) for r in report["records"] if r["status"] != "ok"]
  assert "Steps/s relative to softmax" in (tmp_path / "lra_table.md").read_text()
