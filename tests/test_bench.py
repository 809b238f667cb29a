"""`lra bench` on tiny sizes: well-formed records, ratios and exponents; no timing asserts."""
import functools
import json
import os
import signal
import time

import pytest

from lra.bench import step_time, common
from lra.machine import isolated
from lra.cli import main

def test_exponent_and_ratios_from_known_records():
  # Synthetic records with known power laws: time ~ T^2 for softmax, ~ T for the other.
  lengths = [64, 128, 256, 512]
  records = [{"mixer": m, "seq_len": t, "status": "ok", "time_ms": c * t**p,
              "peak_bytes": 10 * t**p} for m, c, p in (("softmax", 1e-3, 2), ("fast", 2e-2, 1))
             for t in lengths]
  records.append({"mixer": "fast", "seq_len": 1024, "status": "oom", "time_ms": None,
                  "peak_bytes": None})
  s = step_time.summarise(records)
  assert s["mixers"]["softmax"]["time_exponent"] == pytest.approx(2.0)
  assert s["mixers"]["fast"]["memory_exponent"] == pytest.approx(1.0)
  fast = s["mixers"]["fast"]
  assert fast["largest_seq_len"] == 512 and fast["largest_ok_seq_len"] == 512
  assert fast["speedup"] == pytest.approx(1e-3 * 512**2 / (2e-2 * 512))
  assert fast["memory_ratio"] == pytest.approx(512 / 512**2)
  assert {(q["mixer"], q["seq_len"]) for q in s["ratios"]} == {
      (m, t) for m in ("softmax", "fast") for t in lengths}


def test_cli_records_table_plot_and_memory_growth(tmp_path, capsys):
  out = tmp_path / "bench"
  readme = tmp_path / "README.md"
  readme.write_text("intro\n<!-- lra-bench:start -->\nstale\n<!-- lra-bench:end -->\nafter\n")
  code = main(["bench", "--readme", str(readme), "--mixers", "softmax,latte", "--lengths",
               "64,256", "--batch", "1",
               "--dim", "16", "--layers", "1", "--heads", "2", "--steps", "2", "--warmup", "1",
               "--min-time", "0",
               "--in-process", "--matmul-n", "128", "--json", str(out / "b.json"),
               "--md", str(out / "b.md"), "--plot", str(out / "b.png"),
               "--config.mixers.latte.num_latents=4",
               "--xla-log", str(out / "xla.log")])
  assert code == 0
  records = json.loads((out / "b.json").read_text())
  assert [(r["mixer"], r["seq_len"]) for r in records] == [
      ("softmax", 64), ("softmax", 256), ("latte", 64), ("latte", 256)]
  for r in records:
    assert r["status"] == "ok" and r["batch_size"] == 1 and r["device"].startswith("cpu")
    assert r["time_ms"] > 0 and r["peak_bytes"] > 0
    assert r["tokens_per_s"] == pytest.approx(r["seq_len"] / (r["time_ms"] / 1e3))
    assert r["matmul_peak_flops_per_s"] > 0
    assert isinstance(r["execution_path"], str)  # models.mixers.execution_path's answer
  table = (out / "b.md").read_text()
  # Softmax names the path that ran (on a CPU its one-piece formula); latte has one way.
  assert "| softmax [einsum (one piece)] | 256 |" in table and "| latte | 256 |" in table
  assert "| 1.00 | 1.000 |" in table  # softmax vs itself
  assert (out / "b.png").read_bytes()[:4] == b"\x89PNG"
  assert "==== latte T=256 ====" in (out / "xla.log").read_text()
  assert "| softmax [einsum (one piece)] | 64 |" in capsys.readouterr().out
  spliced = readme.read_text()
  assert spliced.startswith("intro\n<!-- lra-bench:start -->") and spliced.endswith(
      "<!-- lra-bench:end -->\nafter\n")
  assert "stale" not in spliced and "| latte |" in spliced and "T=64,256" in spliced

  # XLA's memory analysis is deterministic, so comparing growth between two lengths is fair:
  # latte at most linear in T (parameters and optimizer state are fixed), softmax well beyond.
  peak = {(r["mixer"], r["seq_len"]): r["peak_bytes"] for r in records}
  growth = {m: peak[m, 256] / peak[m, 64] for m in ("softmax", "latte")}
  assert growth["latte"] < 4.0
  assert growth["softmax"] > 2 * growth["latte"]


def test_unknown_mixer_is_an_actionable_error(capsys):
  assert main(["bench", "--mixers", "nope", "--in-process"]) == 2
  assert "Valid mixers" in capsys.readouterr().err


def test_epoch_mode_plans_each_batching_mode_and_counts_its_compiles(tmp_path, capsys):
  # Smoke ListOps (lengths 1-32 in T=32, batch 16): quantum 16 gives (micro-)batches of length 16
  # or 32; sorted2 cuts each batch into two micro-batches of 8 rows.
  out = tmp_path / "epoch.json"
  code = main(["bench", "--epoch", "listops", "--preset", "smoke", "--data-dir",
               str(tmp_path / "data"), "--mixers", "softmax", "--quantum", "16", "--steps", "1",
               "--modes", "fixed,batch,sorted2,bucketing", "--json", str(out)])
  assert code == 0
  (result,) = json.loads(out.read_text())
  rows = {r["mode"]: r for r in result["modes"]}
  assert isinstance(result["setup"]["execution_path"], str)
  assert list(rows) == ["fixed", "batch", "sorted2", "bucketing"]
  assert {r["steps"] for r in rows.values()} == {256 // 16}  # the same epoch length
  assert rows["fixed"]["compiles"] == 1 and rows["fixed"]["lengths"] == [32]
  assert rows["sorted2"]["batching"] == {"padding": "sorted", "quantum": 16, "bucketing": False,
                                         "micro_batches": 2}
  for name, r in rows.items():
    # One program per length; sorted micro-batches add their update and its zeros.
    assert r["compiles"] == len(r["lengths"]) + 2 * (name == "sorted2")
    assert set(r["lengths"]) <= {16, 32} and r["epoch_s"] > 0 and r["estimated"]
  assert rows["bucketing"]["mean_len"] <= rows["batch"]["mean_len"] <= 32
  assert rows["sorted2"]["tokens"] < rows["batch"]["tokens"] <= rows["fixed"]["tokens"]
  assert rows["fixed"]["tokens"] == 16 * 16 * 32 and rows["fixed"]["tokens_vs_fixed"] == 1
  assert rows["bucketing"]["pad_fraction"] < rows["fixed"]["pad_fraction"]
  # Each mode's epoch is the sum of its steps' programs' per-shape times.
  shape_s = result["setup"]["program_s_by_shape"]
  for name, r in rows.items():
    assert sum(r["length_counts"].values()) == r["steps"] * (2 if name == "sorted2" else 1)
    kind, rows_per = ("acc", 8) if name == "sorted2" else ("whole", 16)
    update = shape_s["update"] * r["steps"] if name == "sorted2" else 0.0
    assert r["epoch_s"] == pytest.approx(update + sum(shape_s[f"{kind}/{rows_per}/{t}"] * n
                                                      for t, n in r["length_counts"].items()))
  assert "| bucketing | 16 |" in capsys.readouterr().out
  # Sampled steps: whole steps of every mode at the same indices, over the epoch's length.
  assert main(["bench", "--epoch", "listops", "--preset", "smoke", "--data-dir",
               str(tmp_path / "data"), "--mixers", "softmax", "--quantum", "16",
               "--modes", "fixed,sorted2", "--sample-steps", "3", "--json", str(out)]) == 0
  (sampled,) = json.loads(out.read_text())
  assert sampled["setup"]["sampled_steps"] == [0, 7, 15]
  assert [r["steps"] for r in sampled["modes"]] == [16, 16]
  assert "3 sampled steps" in capsys.readouterr().out


def test_recorded_command_names_no_machine_paths(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  monkeypatch.setenv("HOME", "/home/someone")
  argv = ["lra", "bench", "--epoch", "listops", "--data-dir", "/home/someone/.cache/lra",
          "--json", str(tmp_path / "results" / "e.json"), "--md", "/elsewhere/e.md"]
  assert common.recorded_command(argv) == (
      "lra bench --epoch listops --data-dir ~/.cache/lra --json results/e.json "
      "--md /elsewhere/e.md")
  assert common.recorded_command(["python", "-m", "x"]) == "lra bench"


@pytest.mark.parametrize("message, expected", [
    ("XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 103079215104 "
     "bytes.", True),
    ("INTERNAL: Failed to allocate request for 96.00GiB (103079215104B) on device ordinal 0", True),
    ("INTERNAL: cuDNN error: CUDNN_STATUS_ALLOC_FAILED", True),
    ("INTERNAL: CUDA_ERROR_OUT_OF_MEMORY: out of memory", True),
    ("INTERNAL: Autotuning failed for HLO: %fusion = f32[32,4,16384,16384]", False),
    ("ValueError: Unknown mixer 'nope'", False)])
def test_out_of_memory_is_read_from_the_error_or_the_log(message, expected):
  assert (isolated.out_of_memory(message) is not None) == expected
  # The autotuner fails as INTERNAL and says why only in XLA's log.
  log = "W external/xla/autotuner.cc:123] Out of memory while trying to allocate 96.00GiB\n"
  assert isolated.out_of_memory(message, log) is not None


def test_isolated_calls_end_as_one_line_each(tmp_path, capfd):
  xla_log = tmp_path / "xla.log"
  say = functools.partial(os.write, 2, b"E0000 autotuner: Out of memory while trying\n")
  assert isolated.call_isolated(say, {}, xla_log=xla_log, label="loud") == (44, None, None)
  assert isolated.call_isolated(functools.partial(int, "x"), {})[1].startswith("ValueError")
  result, error, oom = isolated.call_isolated(
      functools.partial(signal.raise_signal, signal.SIGKILL), {})
  assert result is None and "out-of-memory killer" in oom
  began = time.monotonic()
  _, error, oom = isolated.call_isolated(functools.partial(time.sleep, 60), {}, timeout_s=1)
  assert error == "timeout: stopped after 1 s" and oom is None
  assert time.monotonic() - began < 30
  assert xla_log.read_text() == "==== loud ====\nE0000 autotuner: Out of memory while trying\n"
  assert "autotuner" not in capfd.readouterr().err  # XLA's log never reaches the terminal


def test_a_record_out_of_memory_is_one_oom_line_and_time_cuts_lengths(monkeypatch, tmp_path,
                                                                      capfd):
  calls = []

  def fake_measure(mixer, seq_len, **kwargs):
    calls.append((mixer, seq_len))
    if seq_len > 64:
      os.write(2, b"100 lines of the autotuner\nOut of memory while trying to allocate 9 GiB\n")
      raise RuntimeError("INTERNAL: Autotuning failed for HLO %fusion.1")
    return {"mixer": mixer, "seq_len": seq_len, "status": "ok", "time_ms": 1.0,
            "tokens_per_s": 1.0, "peak_bytes": 1, "flops_per_s": 5.0}

  monkeypatch.setattr(step_time, "measure", fake_measure)
  monkeypatch.setattr(step_time, "matmul_peak", lambda **kw: {"matmul_peak_flops_per_s": 10.0})
  lines = []
  records = step_time.run_bench(["softmax", "latte"], [64, 128], 1, dim=16, num_layers=1,
                            num_heads=2, isolate=False, by_length=True, log=lines.append,
                            xla_log=tmp_path / "xla.log")
  assert calls == [("softmax", 64), ("latte", 64), ("softmax", 128), ("latte", 128)]
  assert [(r["mixer"], r["seq_len"], r["status"]) for r in records] == [
      ("softmax", 64, "ok"), ("softmax", 128, "oom"), ("latte", 64, "ok"), ("latte", 128, "oom")]
  assert records[0]["fraction_of_matmul_peak"] == pytest.approx(0.5)
  assert records[1]["oom_detail"] == "Out of memory while trying to allocate 9 GiB"
  assert lines[1].split()[:4] == ["latte", "T=64", "1.0", "ms"]
  assert lines[2] == ("softmax          T=128    oom (Out of memory while trying to allocate "
                      "9 GiB)")
  assert "autotuner" not in capfd.readouterr().err
  assert "100 lines of the autotuner" in (tmp_path / "xla.log").read_text()
  calls.clear()
  late = step_time.run_bench(["latte"], [64], 1, dim=16, num_layers=1, num_heads=2, isolate=False,
                         deadline=time.monotonic())
  assert calls == [] and late[0]["status"] == "not run: out of time"
