"""Faults injected into a run's surroundings: a second process on the same run directory, a lock
left by a killed process or a lost host, an unwritable folder, a checkpoint write that fails.

Each asserts the clear error (what, where, the fix; no traceback; a non-zero exit) or the correct
outcome.
"""
import errno
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lra import run, run_lock
from lra.cli import main

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ["--preset", "smoke", "--quiet"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp("data")
  run.load_data(run.resolve_config("listops", "softmax", "smoke"), root, log=lambda _: None)
  return root


def _wait_for(predicate, proc, timeout=300):
  deadline = time.time() + timeout
  while not predicate():
    assert proc.poll() is None, proc.communicate()
    assert time.time() < deadline, "timed out"
    time.sleep(0.05)


def test_a_second_run_stops_at_once_and_a_killed_holders_lock_is_taken_over(
    data_dir, tmp_path, capsys):
  run_dir = tmp_path / "run"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  holder = subprocess.Popen(
      [sys.executable, "-m", "lra", "run", "listops", "softmax", *SMOKE, "--data-dir",
       str(tmp_path / "holder_data"), "--run-dir", str(run_dir),
       "--config.train.num_steps=100000"],
      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    _wait_for(lambda: (run_dir / "lock").exists(), holder)
    # A second run: stops before reading any data, naming the holder.
    empty_data = tmp_path / "second_data"
    assert main(["run", "listops", "softmax", *SMOKE, "--data-dir", str(empty_data),
                 "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert f"{run_dir} is in use by pid {holder.pid} on host {platform.node()}" in err, err
    assert "lra run listops softmax" in err and "Traceback" not in err
    assert not empty_data.exists()
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.communicate()
  # The holder is gone but its lock stays: the next run takes it over, says so, and runs.
  assert json.loads((run_dir / "lock").read_text())["pid"] == holder.pid
  assert main(["run", "listops", "softmax", *SMOKE, "--data-dir", str(data_dir), "--run-dir",
               str(run_dir), "--config.train.num_steps=2"]) == 0
  err = capsys.readouterr().err
  assert f"taking over {run_dir / 'lock'} from pid {holder.pid}" in err, err
  assert "no longer runs on this host" in err
  assert json.loads((run_dir / "final.json").read_text())["status"] == "complete"
  assert not (run_dir / "lock").exists()  # released at the end


def _foreign_lock(run_dir, age_s):
  run_dir.mkdir(parents=True, exist_ok=True)
  holder = {"pid": 4242, "host": "some-other-host", "started": "2026-01-01T00:00:00+00:00",
            "command": "lra run listops latte", "pid_start": "1"}
  lock = run_dir / "lock"
  lock.write_text(json.dumps(holder))
  os.utime(lock, (time.time() - age_s, time.time() - age_s))
  return lock


def test_a_lock_from_another_host_is_judged_by_its_refreshes(tmp_path, monkeypatch):
  lines = []
  fresh = _foreign_lock(tmp_path / "fresh", age_s=5)
  with pytest.raises(run_lock.RunDirLocked, match="pid 4242 on host some-other-host"):
    run_lock.RunDirLock(fresh.parent, log=lines.append).__enter__()
  stale = _foreign_lock(tmp_path / "stale", age_s=run_lock.STALE_AFTER_S + 60)
  monkeypatch.setattr(run_lock, "REFRESH_S", 0.05)
  with run_lock.RunDirLock(stale.parent, log=lines.append):
    assert json.loads(stale.read_text())["pid"] == os.getpid()
    assert lines == [f"taking over {stale} from pid 4242 on host some-other-host (started "
                     "2026-01-01T00:00:00+00:00, running `lra run listops latte`): not refreshed "
                     f"for {run_lock.STALE_AFTER_S + 60:.0f} s (more than "
                     f"{run_lock.STALE_AFTER_S:.0f} s: its host is gone)"]
    # While held, the lock is refreshed, so other hosts see it as alive.
    os.utime(stale, (time.time() - 600, time.time() - 600))
    deadline = time.time() + 30
    while time.time() - stale.stat().st_mtime > 60 and time.time() < deadline:
      time.sleep(0.05)
    assert time.time() - stale.stat().st_mtime < 60
  assert not stale.exists()


def test_a_lock_whose_pid_now_belongs_to_another_process_is_stale(tmp_path):
  run_dir = tmp_path / "run"
  run_dir.mkdir()
  me = run_lock.Holder.this_process()
  reused = dict(me.__dict__, pid_start="0")  # this pid, but a process started at another time
  (run_dir / "lock").write_text(json.dumps(reused))
  lines = []
  with run_lock.RunDirLock(run_dir, log=lines.append):
    pass
  assert len(lines) == 1 and f"pid {os.getpid()} no longer runs on this host" in lines[0]


def test_an_unwritable_run_dir_is_reported_before_any_training(tmp_path, capsys):
  # /sys refuses new folders to every user, root included (chmod would not stop root).
  run_dir = Path("/sys/lra-test-run")
  try:
    run_dir.mkdir()
  except OSError:
    pass
  else:
    run_dir.rmdir()
    pytest.skip("needs Linux's /sys, where no one may create a folder")
  data = tmp_path / "data"
  assert main(["run", "listops", "softmax", *SMOKE, "--data-dir", str(data), "--run-dir",
               str(run_dir)]) == 2
  err = capsys.readouterr().err
  assert err.startswith(f"lra: error: cannot write to {run_dir} (") and "--run-dir" in err, err
  assert "Traceback" not in err and not data.exists()  # stopped before generating data


def test_a_failed_checkpoint_write_keeps_the_previous_checkpoint(data_dir, tmp_path):
  run_dir = tmp_path / "run"
  args = ["run", "listops", "softmax", *SMOKE, "--data-dir", str(data_dir), "--run-dir",
          str(run_dir), "--config.train.num_steps=8", "--config.checkpoint.every_steps=2",
          "--config.eval.every_steps=100"]
  env = dict(os.environ, JAX_PLATFORMS="cpu", LRA_PROBE_LOG=str(tmp_path / "probe.jsonl"))
  full = subprocess.run([sys.executable, "tests/lra_probed.py", *args], cwd=ROOT, text=True,
                        capture_output=True, env=dict(env, LRA_PROBE_DISK_FULL_AT_CHECKPOINT="4"))
  assert full.returncode == 2
  assert full.stderr.startswith(f"lra: error: could not write a checkpoint in "
                                f"{run_dir.resolve() / 'checkpoints'} ("), full.stderr
  assert "No space left on device" in full.stderr
  assert "the checkpoint of step 2 is intact" in full.stderr
  assert len(full.stderr.splitlines()) == 1  # one line: Orbax's own tracebacks stay quiet
  final = json.loads((run_dir / "final.json").read_text())
  assert final["status"] == "interrupted" and "checkpoint write failed" in final["stop_reason"]
  steps = sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit())
  assert steps == ["2"]
  # Space is back: the same command resumes from step 2 and finishes.
  resumed = subprocess.run([sys.executable, "tests/lra_probed.py", *args], cwd=ROOT, text=True,
                           capture_output=True, env=env)
  assert resumed.returncode == 0, resumed.stderr
  final = json.loads((run_dir / "final.json").read_text())
  assert final["status"] == "complete" and final["step"] == 8
  reads = [json.loads(line) for line in (tmp_path / "probe.jsonl").read_text().splitlines()]
  steps = [r["step"] for r in reads if r["kind"] == "train"]
  assert steps == [1, 2, 3, 4, 5, 6, 3, 4, 5, 6, 7, 8]  # stopped at 6, resumed after step 2
  assert not list((run_dir / "checkpoints").glob("*tmp*"))  # the half-written one is cleaned up
