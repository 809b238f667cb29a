"""Two processes on localhost, started as the README tells users to start hosts: CPU collectives
over Gloo, JAX_COORDINATOR_ADDRESS, LRA_NUM_PROCESSES, LRA_PROCESS_ID and `lra run --distributed`.

Each process runs through tests/lra_probed.py, which logs the batches the process reads and the
files it writes in the run directory, and can kill or freeze it at a given step.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lra.runs.config_loading import data_cache_dir, resolve_config
from lra import run
from lra.machine import stop_after
from lra.tasks.contract.batches import Batching, eval_batches, train_batches
from lra.tasks.contract.cache import PreparedData
from lra.runs.writers import read_metrics

ROOT = Path(__file__).resolve().parents[1]
# Tiny: the cost is start-up and compiling; 8 steps cross two evaluations and two checkpoints.
OVERRIDES = ["train.num_steps=8", "train.log_every_steps=2", "eval.every_steps=4",
             "checkpoint.every_steps=4"]
SCORES = ("status", "step", "best_step", "val_accuracy", "test_accuracy", "test_accuracy_last",
          "best_test_accuracy")
RUN_FILES = {"config.json", "metrics.jsonl", "final.json"}


@pytest.fixture(scope="module")
def compile_cache(tmp_path_factory):
  """JAX's persistent compilation cache, shared by this module's launches: compiling is most of
  a tiny run's time, and every launch compiles the same programs."""
  return tmp_path_factory.mktemp("jax_cache")


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _start_hosts(data_dir, run_dir, logs, cache, faults=({}, {}), timeout_s=None,
                 overrides=OVERRIDES, args=()):
  """Both processes of a two-host run, as the README's by-hand recipe starts them."""
  port = _free_port()
  procs = []
  for index in (0, 1):
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_cpu_multi_thread_eigen=false",
               JAX_COMPILATION_CACHE_DIR=str(cache),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_CPU_COLLECTIVES_IMPLEMENTATION="gloo",
               JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", LRA_NUM_PROCESSES="2",
               LRA_PROCESS_ID=str(index), LRA_PROBE_LOG=str(logs / f"process{index}.jsonl"),
               **faults[index])
    if timeout_s:
      env["LRA_PEER_TIMEOUT_S"] = str(timeout_s)
    procs.append(subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "lra_probed.py"), "run", "listops", "softmax",
         "--preset", "smoke", "--quiet", "--data-dir", str(data_dir), "--run-dir", str(run_dir),
         "--distributed", *args, *(f"--config.{o}" for o in overrides)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
  return procs


def _finish(procs, timeout=600):
  results = []
  for proc in procs:
    out, err = proc.communicate(timeout=timeout)
    results.append((proc.returncode, out, err, time.time()))
  return results


def _probe(logs, index):
  return [json.loads(line) for line in (logs / f"process{index}.jsonl").read_text().splitlines()]


def _rows(run_dir):
  """metrics.jsonl without the timing column."""
  return [{k: v for k, v in r.items() if k != "train/steps_per_s"}
          for r in read_metrics(run_dir / "metrics.jsonl")]


@pytest.fixture(scope="module")
def two_hosts(data_dir, compile_cache, tmp_path_factory):
  """An uninterrupted two-process run: (run dir, probe log dir, results)."""
  root = tmp_path_factory.mktemp("two_hosts")
  run_dir, logs = root / "run", root / "logs"
  logs.mkdir()
  results = _finish(_start_hosts(data_dir, run_dir, logs, compile_cache))
  for code, _, err, _ in results:
    assert code == 0, err
  return run_dir, logs


def test_two_processes_equal_one_and_share_the_work(data_dir, two_hosts, tmp_path):
  run_dir, logs = two_hosts
  one = run.run("listops", "softmax", preset="smoke", overrides=OVERRIDES, data_dir=data_dir,
                run_dir=tmp_path / "one", progress=False)
  two = json.loads((run_dir / "final.json").read_text())
  assert two["num_processes"] == 2 and two["num_devices"] == 2
  assert {k: two[k] for k in SCORES} == {k: one[k] for k in SCORES}
  reference = _rows(tmp_path / "one")
  rows = _rows(run_dir)
  assert [sorted(r) for r in rows] == [sorted(r) for r in reference]
  for got, want in zip(rows, reference):
    for key, value in want.items():  # counts exact; float sums in another order to 1e-5
      assert got[key] == pytest.approx(value, rel=1e-5, abs=1e-6), (key, got["step"])

  # Each process read its own half of every batch, and the halves make the global batch.
  data = PreparedData(data_cache_dir(resolve_config("listops", "softmax", "smoke"),
                                         data_dir))
  config = resolve_config("listops", "softmax", "smoke", OVERRIDES)
  probes = [_probe(logs, index) for index in (0, 1)]
  train_reads = [[r for r in p if r["kind"] == "train"] for p in probes]
  stream = train_batches(data.split("train"), data.spec, 16, config.train.seed)
  assert len(train_reads[0]) == len(train_reads[1]) == 8
  for first, second in zip(*train_reads):
    whole = next(stream)
    assert len(first["label"]) == len(second["label"]) == 8
    assert first["label"] + second["label"] == whole["label"].tolist()
  eval_reads = [[r for r in p if r["kind"] == "eval"] for p in probes]
  wholes = [b for _ in range(2) for split in ("val", "test")
            for b in eval_batches(data.split(split), data.spec, 32)]
  assert len(eval_reads[0]) == len(eval_reads[1]) == len(wholes)
  for first, second, whole in zip(*eval_reads, wholes):
    assert first["label"] + second["label"] == whole["label"].tolist()
    assert first["inputs"] != second["inputs"]

  # Only process 0 wrote the run files (process 1 may write its part of a checkpoint only).
  written = [{r["path"] for r in p if r["kind"] == "write"} for p in probes]
  assert RUN_FILES <= written[0]
  assert not {p for p in written[1] if not p.startswith("checkpoints/")}, written[1]


@pytest.mark.parametrize("victim, fault", [
    (1, "DIE"),
    pytest.param(0, "DIE", marks=pytest.mark.slow, id="0-DIE-the-coordinator"),
    pytest.param(1, "FREEZE", marks=pytest.mark.slow, id="1-FREEZE-no-answer-no-closed-socket"),
])
def test_a_lost_process_stops_the_survivor_and_all_resume_to_the_same_scores(
    victim, fault, data_dir, compile_cache, two_hosts, tmp_path):
  reference_dir, _ = two_hosts
  run_dir, logs = tmp_path / "run", tmp_path / "logs"
  logs.mkdir()
  survivor = 1 - victim
  # The victim dies (SIGKILL) or freezes (SIGSTOP) as it starts step 6, once the checkpoint of
  # step 4 is complete. A frozen peer closes no socket: the survivor waits LRA_PEER_TIMEOUT_S.
  faults = [{}, {}]
  faults[victim] = {f"LRA_PROBE_{fault}_AT_STEP": "6", "LRA_PROBE_AFTER_CHECKPOINT": "4"}
  timeout_s = 5 if fault == "FREEZE" else None
  procs = _start_hosts(data_dir, run_dir, logs, compile_cache, faults, timeout_s)
  code, _, err, ended = _finish([procs[survivor]])[0]
  if fault == "FREEZE":
    procs[victim].send_signal(signal.SIGKILL)
  victim_code, _, victim_err, _ = _finish([procs[victim]])[0]
  assert victim_code == -signal.SIGKILL, victim_err
  faulted = next(r for r in _probe(logs, victim) if r["kind"] == fault.lower())["time"]
  stop_s = ended - faulted
  print(f"survivor {survivor} stopped {stop_s:.1f} s after process {victim} {fault}: {err}")
  assert stop_s < (timeout_s or 0) + 60  # generous: a loaded machine; typically 0.3 s and 5 s
  assert code == 75, err
  assert "Traceback" not in err
  lines = [line for line in err.splitlines() if line.startswith("lra: ")]
  assert len(lines) == 1 and f"lost process {victim} of 2" in lines[0], err
  assert ("Timed out" in lines[0]) == (fault == "FREEZE")  # the collective timeout, not a reset
  assert "resumable from its checkpoint at step 4" in lines[0] and "--distributed" in lines[0]
  final = json.loads((run_dir / "final.json").read_text())
  assert final["status"] == "interrupted" and f"lost process {victim}" in final["stop_reason"]
  if victim == 0:  # process 0 writes the run files; once it is gone, the survivor records the stop
    assert "final.json" in {r["path"] for r in _probe(logs, 1) if r["kind"] == "write"}
  # The lock: released by a surviving process 0, left behind by a killed one (and taken over).
  assert (run_dir / "lock").exists() == (victim == 0)

  # Restart both: they resume from the last complete checkpoint and end where an uninterrupted
  # run ends, every loss and score equal.
  restart_logs = tmp_path / "restart_logs"
  restart_logs.mkdir()
  restarted = _finish(_start_hosts(data_dir, run_dir, restart_logs, compile_cache))
  for code, _, err, _ in restarted:
    assert code == 0, err
  assert ("taking over" in restarted[0][2]) == (victim == 0)
  first_steps = [next(r["step"] for r in _probe(restart_logs, i) if r["kind"] == "train")
                 for i in (0, 1)]
  assert first_steps == [5, 5]  # resumed from the checkpoint of step 4
  resumed = json.loads((run_dir / "final.json").read_text())
  reference = json.loads((reference_dir / "final.json").read_text())
  assert {k: resumed[k] for k in SCORES} == {k: reference[k] for k in SCORES}
  assert _rows(run_dir) == _rows(reference_dir)


@pytest.mark.slow  # two processes started and compiled once more
def test_sigterm_to_one_process_stops_every_process_at_the_next_step(
    data_dir, compile_cache, tmp_path):
  """A scheduler's SIGTERM reaches one host: all stop together within a step or two (no log point
  on the way: they agree through the flag each step carries), save, and exit as `interrupted`."""
  run_dir, logs = tmp_path / "run", tmp_path / "logs"
  logs.mkdir()
  far = 10**6  # no log, eval or checkpoint point before the stop
  procs = _start_hosts(data_dir, run_dir, logs, compile_cache, overrides=[
      f"train.num_steps={far}", f"train.log_every_steps={far}", f"eval.every_steps={far}",
      f"checkpoint.every_steps={far}"])

  def read(index):
    return [r["step"] for r in _probe(logs, index) if r["kind"] == "train"] if (
        logs / f"process{index}.jsonl").exists() else []
  deadline = time.time() + 300
  while min(len(read(0)), len(read(1))) < 20:  # past compiling, into steady steps
    assert all(p.poll() is None for p in procs) and time.time() < deadline
    time.sleep(0.05)
  reached = max(read(1))
  signalled = time.time()
  procs[1].send_signal(signal.SIGTERM)
  results = _finish(procs)
  stop_s = max(ended for *_, ended in results) - signalled
  for code, _, err, _ in results:
    assert code == 130, err
    assert "Traceback" not in err
  final = json.loads((run_dir / "final.json").read_text())
  stopped = final["step"]
  # The batch of step `reached` was being read: its step or the next carries the request, and the
  # flag is read one step late.
  assert reached <= stopped <= reached + 3
  assert [max(read(0)), max(read(1))] == [stopped, stopped]  # both stopped at the same step
  assert final["status"] == "interrupted"
  assert final["stop_reason"] == "stop requested on another process"  # process 0 was not signalled
  assert (run_dir / "checkpoints" / str(stopped) / "lra_manifest.json").exists()
  times = [r["time"] for r in _probe(logs, 0) if r["kind"] == "train"][5:]
  step_s = (times[-1] - times[0]) / (len(times) - 1)
  print(f"SIGTERM at step {reached}, stopped at step {stopped}, both exited {stop_s:.2f} s later; "
        f"a step took {1e3 * step_s:.1f} ms")
  assert stop_s < 60  # generous: a loaded machine; the checkpoint write is most of it


def test_stop_after_on_two_hosts_budgets_the_steps_a_stop_takes_to_land(
    data_dir, compile_cache, tmp_path):
  """--stop-after with two processes: a stop asked for after step k lands after step k + 2 (the
  request rides on the next step's batch, whose flag is read one step late), so the deadline
  budgets those two steps too, and every process ends within the limit. Each step is made to look
  30 s long on the clock --stop-after reads (LRA_PROBE_STEP_SECONDS), more than the stop's own
  reserve, so two steps left out of the budget would overrun it; the run itself stays short."""
  run_dir, logs = tmp_path / "run", tmp_path / "logs"
  logs.mkdir()
  step_s, limit, far = 30.0, 600, 10**6
  slow = {"LRA_PROBE_STEP_SECONDS": str(step_s)}
  results = _finish(_start_hosts(
      data_dir, run_dir, logs, compile_cache, (slow, slow), args=("--stop-after", str(limit)),
      overrides=[f"train.num_steps={far}", "train.log_every_steps=1", f"eval.every_steps={far}",
                 f"checkpoint.every_steps={far}"]))
  for code, _, err, _ in results:
    assert code == 130, err
  final = json.loads((run_dir / "final.json").read_text())
  assert final["status"] == "interrupted" and final["stop_reason"] == f"--stop-after {limit} s"
  stopped = final["step"]
  assert stopped > 5  # trained, then stopped: not before training
  for index in (0, 1):
    assert max(r["step"] for r in _probe(logs, index) if r["kind"] == "train") == stopped
  assert (run_dir / "checkpoints" / str(stopped) / "lra_manifest.json").exists()
  # Each process's clock from its start to the end of `lra`: within the limit, and not early by
  # more than a step and the stop's reserve (no save was timed: its guess) and 5 s of slack.
  exits = [next(r["elapsed"] for r in _probe(logs, i) if r["kind"] == "exit") for i in (0, 1)]
  reserve = 2 * stop_after.FIRST_SAVE_GUESS_S + stop_after.MARGIN_S
  print(f"stopped at step {stopped}; {exits} s of the {limit} s limit")
  assert max(exits) <= limit
  assert min(exits) > limit - step_s - reserve - 5


def test_a_bad_peer_timeout_says_what_to_set(monkeypatch):
  from lra.machine import distributed
  monkeypatch.setenv("LRA_PEER_TIMEOUT_S", "2m")
  with pytest.raises(ValueError, match=r"LRA_PEER_TIMEOUT_S='2m': expected a whole number of "
                     r"seconds >= 1, e.g. LRA_PEER_TIMEOUT_S=120"):
    distributed.peer_timeout_s()
  monkeypatch.setenv("LRA_PEER_TIMEOUT_S", "7")
  assert distributed.peer_timeout_s() == 7


@pytest.mark.slow  # two processes and a reference run, each compiling its micro-batch shapes
def test_two_processes_train_sorted_micro_batches_as_one(data_dir, compile_cache, tmp_path):
  """Sorted micro-batches over two hosts: each global batch is sorted and cut before it is
  shared, every process reads its half of every micro-batch, and the run equals one process's."""
  from lra.tasks.contract.batches import step_batches
  overrides = [*OVERRIDES, "data.padding=sorted", "data.pad_quantum=16",
               "train.grad_accum_steps=2"]
  run_dir, logs = tmp_path / "run", tmp_path / "logs"
  logs.mkdir()
  for code, _, err, _ in _finish(_start_hosts(data_dir, run_dir, logs, compile_cache,
                                              overrides=overrides)):
    assert code == 0, err
  one = run.run("listops", "softmax", preset="smoke", overrides=overrides, data_dir=data_dir,
                run_dir=tmp_path / "one", progress=False)
  two = json.loads((run_dir / "final.json").read_text())
  assert two["num_processes"] == 2 and two["batching"]["micro_batches"] == 2
  assert {k: two[k] for k in SCORES} == {k: one[k] for k in SCORES}
  for got, want in zip(_rows(run_dir), _rows(tmp_path / "one"), strict=True):
    for key, value in want.items():
      assert got[key] == pytest.approx(value, rel=1e-5, abs=1e-6), (key, got["step"])
  config = resolve_config("listops", "softmax", "smoke", overrides)
  data = PreparedData(data_cache_dir(config, data_dir))
  stream = step_batches(data.split("train"), data.spec, 16, config.train.seed,
                        batching=Batching.of(config))
  reads = [[r for r in _probe(logs, index) if r["kind"] == "train"] for index in (0, 1)]
  assert len(reads[0]) == len(reads[1]) == 8
  for first, second in zip(*reads):
    micro = next(stream)  # two micro-batches of 8 rows: each process holds 4 rows of each
    assert first["label"] == [y for m in micro for y in m["label"][:4].tolist()]
    assert second["label"] == [y for m in micro for y in m["label"][4:].tolist()]
