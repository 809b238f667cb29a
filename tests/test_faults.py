"""Faults injected into a run's surroundings: a second process on the same run directory, a lock
left by a killed process or a lost host, an unwritable folder, a checkpoint write that fails.

Each asserts the clear error (what, where, the fix; no traceback; a non-zero exit) or the correct
outcome.
"""
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lra.runs.config_loading import load_data, resolve_config
from lra import run
from lra.report import run_summary
from lra.runs import run_lock
from lra.cli import main

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ["--preset", "smoke", "--quiet"]


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


def test_a_killed_runs_final_json_says_where_it_resumes_and_its_best_so_far(data_dir, tmp_path):
  """final.json follows every checkpoint, so a run killed with no chance to write it (kill -9, a
  session's end) is tabled at a checkpoint's step with its evaluations, not at its start."""
  run_dir = tmp_path / "run"
  env = dict(os.environ, JAX_PLATFORMS="cpu", LRA_PROBE_LOG=str(tmp_path / "probe.jsonl"),
             LRA_PROBE_DIE_AT_STEP="7", LRA_PROBE_AFTER_CHECKPOINT="4")
  killed = subprocess.run(
      [sys.executable, "tests/lra_probed.py", "run", "listops", "softmax", *SMOKE, "--data-dir",
       str(data_dir), "--run-dir", str(run_dir), "--config.train.num_steps=8",
       "--config.checkpoint.every_steps=2", "--config.eval.every_steps=2"],
      cwd=ROOT, env=env, capture_output=True, text=True)
  assert killed.returncode == -signal.SIGKILL, killed.stderr
  final = json.loads((run_dir / "final.json").read_text())
  assert final["status"] == "running" and final["step"] >= 4, final
  assert final["best_step"] >= 2 and final["test_accuracy"] is not None
  assert run_summary.state_text(final).startswith(f"in progress: step {final['step']} of 8, "
                                                  "best so far ")


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


# ---------------------------------------------------------------------------------------------
# Damaged checkpoints: real checkpoint files cut short, deleted, overwritten, their metadata gone.

DAMAGE_RUN = ["train.num_steps=8", "eval.every_steps=2", "checkpoint.every_steps=2",
              "checkpoint.keep=3"]


@pytest.fixture(scope="module")
def stopped_run(data_dir, tmp_path_factory):
  """A run stopped by SIGTERM after its step-6 checkpoint (sealed checkpoints of steps 2, 4, 6 and
  a best one), and the final.json of the same run uninterrupted."""
  from lra.runs import checkpoints
  root = tmp_path_factory.mktemp("damage")
  reference = run.run("listops", "softmax", preset="smoke", overrides=DAMAGE_RUN,
                      data_dir=data_dir, run_dir=root / "reference", progress=False)
  save = checkpoints.Checkpointer.save

  def save_then_stop(self, step, *args, **kwargs):
    save(self, step, *args, **kwargs)
    if step == 6 and not kwargs.get("best"):
      os.kill(os.getpid(), signal.SIGTERM)

  checkpoints.Checkpointer.save = save_then_stop
  try:
    stopped = run.run("listops", "softmax", preset="smoke", overrides=DAMAGE_RUN,
                      data_dir=data_dir, run_dir=root / "stopped", progress=False)
  finally:
    checkpoints.Checkpointer.save = save
  assert stopped["status"] == "interrupted" and stopped["step"] == 6
  ckpts = root / "stopped" / "checkpoints"
  assert sorted(p.name for p in ckpts.iterdir()) == ["2", "4", "6", "best"]
  assert all((ckpts / s / "lra_manifest.json").exists() for s in ("2", "4", "6"))
  return root / "stopped", reference


def _array_file(step_dir):
  """The largest array file of a checkpoint (the parameters and Adam moments)."""
  return max((p for p in (step_dir / "state").rglob("*") if p.is_file() and "/d/" in str(p)),
             key=lambda p: p.stat().st_size)


def _cut_short(step_dir):
  path = _array_file(step_dir)
  os.truncate(path, path.stat().st_size // 2)
  return "is cut short"


def _deleted(step_dir):
  _array_file(step_dir).unlink()
  return "is missing"


def _bytes_changed(step_dir):
  path = _array_file(step_dir)
  with open(path, "r+b") as f:  # same size, eight bytes of the data overwritten
    f.seek(path.stat().st_size // 2)
    f.write(b"\xff" * 8)
  return "has changed since it was written"


def _metadata_removed(step_dir):
  (step_dir / "state" / "_METADATA").unlink()
  return "state/_METADATA is missing"


def _unsealed_metadata_cut_short(step_dir):
  # A checkpoint killed before its manifest was written: Orbax's own reading finds the damage.
  (step_dir / "lra_manifest.json").unlink()
  metadata = step_dir / "bookkeeping" / "metadata"
  os.truncate(metadata, 20)
  return "Orbax cannot read it"


@pytest.mark.parametrize("damage", [_cut_short, _deleted, _bytes_changed, _metadata_removed,
                                    _unsealed_metadata_cut_short], ids=lambda f: f.__name__[1:])
def test_a_damaged_checkpoint_is_moved_aside_and_the_run_resumes_from_the_newest_intact_one(
    damage, stopped_run, data_dir, tmp_path, capsys):
  from lra.runs import checkpoints
  from lra.training import train
  run_dir = tmp_path / "run"
  shutil.copytree(stopped_run[0], run_dir)
  said = damage(run_dir / "checkpoints" / "6")
  config = resolve_config("listops", "softmax", "smoke", DAMAGE_RUN)
  data = load_data(config, data_dir)
  s = train.setup(config, data.spec)
  ckpt = checkpoints.Checkpointer(run_dir, keep=3)
  try:
    _, book, step = train.restore_or_init(s, data.spec, 0, ckpt)
  finally:
    ckpt.close()
  assert step == 4 and 0 < book.best_val["step"] <= 4
  lines = capsys.readouterr().err.splitlines()
  assert len(lines) == 2, lines
  assert lines[0].startswith(f"lra: the checkpoint of step 6 in {run_dir / 'checkpoints' / '6'} "
                             "is damaged (") and said in lines[0], lines[0]
  moved = list((run_dir / "checkpoints" / "damaged").iterdir())
  assert len(moved) == 1 and moved[0].name.startswith("6-") and f"moved to {moved[0]}" in lines[0]
  assert lines[1] == "lra: resuming from step 4, the newest intact checkpoint"
  assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["2", "4", "best",
                                                                         "damaged"]


def test_a_resumed_run_past_a_damaged_checkpoint_ends_as_an_uninterrupted_one(
    stopped_run, data_dir, tmp_path, capsys):
  run_dir = tmp_path / "run"
  shutil.copytree(stopped_run[0], run_dir)
  _bytes_changed(run_dir / "checkpoints" / "6")  # the damage Orbax alone would not see
  assert main(["run", "listops", "softmax", *SMOKE, "--data-dir", str(data_dir), "--run-dir",
               str(run_dir), *(f"--config.{o}" for o in DAMAGE_RUN)]) == 0
  err = capsys.readouterr().err
  assert "Traceback" not in err and "resuming from step 4" in err, err
  final = json.loads((run_dir / "final.json").read_text())
  reference = stopped_run[1]
  for key in ("status", "step", "best_step", "val_accuracy", "test_accuracy",
              "best_test_accuracy", "test_accuracy_last"):
    assert final[key] == reference[key], key
  assert [p.name[:2] for p in (run_dir / "checkpoints" / "damaged").iterdir()] == ["6-"]


def test_resuming_past_an_unreadable_checkpoint_prints_no_event_loop_tracebacks(
    stopped_run, data_dir, tmp_path):
  # A checkpoint written but never sealed (killed first), its array files then cut to 7 bytes:
  # Orbax's own read fails, and TensorStore's reads still in flight reported, each on its own
  # thread, "RuntimeError: Event loop is closed" (dozens of tracebacks) around the one line.
  run_dir = tmp_path / "run"
  shutil.copytree(stopped_run[0], run_dir)
  newest = run_dir / "checkpoints" / "6"
  (newest / "lra_manifest.json").unlink()
  for path in (newest / "state").rglob("*"):
    if path.is_file() and "/d/" in str(path):
      os.truncate(path, 7)
  resumed = subprocess.run(
      [sys.executable, "-m", "lra", "run", "listops", "softmax", *SMOKE, "--data-dir",
       str(data_dir), "--run-dir", str(run_dir), *(f"--config.{o}" for o in DAMAGE_RUN)],
      cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True, text=True,
      timeout=300)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  err = resumed.stderr
  assert "Event loop is closed" not in err and "Traceback" not in err, err[-3000:]
  assert f"the checkpoint of step 6 in {newest} is damaged (Orbax cannot read it" in err, err
  assert "lra: resuming from step 4, the newest intact checkpoint" in err
  assert json.loads((run_dir / "final.json").read_text())["status"] == "complete"


def test_only_the_closed_event_loop_reports_are_dropped(monkeypatch):
  from types import SimpleNamespace
  from lra.runs import checkpoints
  seen = []
  monkeypatch.setattr(sys, "unraisablehook", seen.append)
  undo = checkpoints.drop_closed_loop_reports()
  checkpoints.drop_closed_loop_reports()()  # in place already: not wrapped twice, nor undone

  def report(error):
    try:
      raise error
    except RuntimeError as raised:
      return SimpleNamespace(exc_type=type(raised), exc_value=raised,
                             exc_traceback=raised.__traceback__, err_msg=None, object=None)
  import asyncio  # pylint: disable=import-outside-toplevel
  loop = asyncio.new_event_loop()
  loop.close()
  try:
    loop.call_soon_threadsafe(print)
  except RuntimeError as closed:
    sys.unraisablehook(SimpleNamespace(exc_type=RuntimeError, exc_value=closed,
                                       exc_traceback=closed.__traceback__, err_msg=None,
                                       object=None))
  other = report(RuntimeError("Event loop is closed"))  # the words, not asyncio's check
  real = report(RuntimeError("a real error"))
  sys.unraisablehook(other)
  sys.unraisablehook(real)
  assert seen == [other, real]
  undo()  # after a read that succeeded: the hook that was there before
  assert sys.unraisablehook == seen.append  # pylint: disable=comparison-with-callable


def test_no_intact_checkpoint_says_so_and_the_same_command_starts_again(
    stopped_run, data_dir, tmp_path, capsys, monkeypatch):
  run_dir = tmp_path / "run"
  shutil.copytree(stopped_run[0], run_dir)
  for step, damage in (("2", _deleted), ("4", _metadata_removed), ("6", _cut_short)):
    damage(run_dir / "checkpoints" / step)
  args = ["run", "listops", "softmax", *SMOKE, "--data-dir", str(data_dir), "--run-dir",
          str(run_dir), *(f"--config.{o}" for o in DAMAGE_RUN)]
  monkeypatch.setattr(sys, "argv", ["lra", *args])  # as the shell would start it
  assert main(args) == 2
  err = capsys.readouterr().err
  last = err.splitlines()[-1]
  assert last.startswith(f"lra: error: no intact checkpoint in {run_dir / 'checkpoints'} (3 "
                         "damaged, moved to "), err
  assert last.endswith("the same command now starts the run again from step 0: lra " +
                       " ".join(args)), last
  assert "Traceback" not in err and len(err.splitlines()) == 4  # one line per damaged step
  assert len(list((run_dir / "checkpoints" / "damaged").iterdir())) == 3
  assert main(args) == 0
  assert "holds no checkpoint" in capsys.readouterr().err  # started again from step 0
  assert json.loads((run_dir / "final.json").read_text())["status"] == "complete"


def test_eval_names_a_damaged_best_checkpoint_and_moves_nothing(stopped_run, data_dir, tmp_path,
                                                                capsys):
  run_dir = tmp_path / "run"
  shutil.copytree(stopped_run[0], run_dir)
  best = next((run_dir / "checkpoints" / "best").iterdir())
  _cut_short(best)
  before = sorted(str(p) for p in run_dir.rglob("*"))
  assert main(["eval", str(run_dir), "--data-dir", str(data_dir)]) == 2
  err = capsys.readouterr().err
  assert err.startswith(
      f"lra: error: the checkpoint of step {best.name} in {best} is damaged ("), err
  assert "is cut short" in err and f"lra eval {run_dir} --checkpoint last" in err, err
  assert len(err.splitlines()) == 1
  assert sorted(str(p) for p in run_dir.rglob("*")) == before


# ---------------------------------------------------------------------------------------------
# Out of memory: before the first step where XLA's estimate says so, else when an allocation fails.

def test_a_step_too_big_for_the_device_stops_before_training_in_one_line(
    data_dir, stopped_run, tmp_path, capsys, monkeypatch):
  monkeypatch.setenv("LRA_DEVICE_MEMORY", "1MB")  # the smoke model's train step needs ~2 MB
  run_dir = tmp_path / "new"
  args = ["run", "listops", "softmax", *SMOKE, "--data-dir", str(data_dir)]
  assert main([*args, "--run-dir", str(run_dir)]) == 2
  err = capsys.readouterr().err
  assert err.startswith("lra: error: the train step needs "), err
  assert "MiB per device (XLA's estimate) and cpu:cpu has 1.0 MiB (LRA_DEVICE_MEMORY)" in err
  for setting in ("--config.train.grad_accum_steps=2 (the same batch of 16 in slices of 8)",
                  "--config.model.remat=true", "--config.mixers.softmax.query_chunk=128",
                  "--config.model.dtype=bfloat16"):
    assert setting in err, setting
  assert len(err.splitlines()) == 1 and "Traceback" not in err
  assert not run_dir.exists()  # it held nothing before: nothing is left behind
  # Settings already chosen are not offered again.
  assert main([*args, "--run-dir", str(run_dir), "--config.model.remat=true",
               "--config.model.dtype=bfloat16"]) == 2
  err = capsys.readouterr().err
  assert "remat" not in err and "dtype" not in err and "grad_accum_steps" in err, err
  # A folder that held a run keeps it, and its final.json says why it stopped.
  held = tmp_path / "held"
  shutil.copytree(stopped_run[0], held)
  assert main([*args, "--run-dir", str(held), *(f"--config.{o}" for o in DAMAGE_RUN)]) == 2
  err = capsys.readouterr().err
  assert err.startswith("lra: error: the train step needs "), err
  final = json.loads((held / "final.json").read_text())
  assert final["status"] == "failed" and final["stop_reason"] == err[len("lra: error: "):].strip()
  assert (held / "checkpoints" / "6").is_dir()  # it held a run: kept
  monkeypatch.setenv("LRA_DEVICE_MEMORY", "100kB")  # below even the eval step's needs
  assert main(["eval", str(held), "--data-dir", str(data_dir)]) == 2
  err = capsys.readouterr().err
  assert err.startswith("lra: error: the eval step needs ") and "--config.eval.batch_size=" in err


@pytest.mark.slow  # generates its own longer sequences
def test_an_allocation_that_fails_despite_the_estimate_ends_the_run_in_the_same_line(tmp_path):
  run_dir = tmp_path / "run"
  # Sequences of ~256 tokens, batch 128: softmax's train step allocates ~300 MB at once, more than
  # the 64 MB of address space left to the process from step 3 on.
  args = ["run", "listops", "softmax", *SMOKE, "--data-dir", str(tmp_path / "data"),
          "--run-dir", str(run_dir), "--config.train.num_steps=4",
          "--config.data.generator.max_length=512", "--config.data.generator.max_depth=6",
          "--config.data.generator.max_args=8", "--config.train.batch_size=128",
          "--config.checkpoint.every_steps=100"]
  env = dict(os.environ, JAX_PLATFORMS="cpu", LRA_PROBE_LOG=str(tmp_path / "probe.jsonl"),
             LRA_PROBE_MEMORY_LIMIT_AT_STEP="3", LRA_PROBE_MEMORY_MARGIN_MB="64")
  run_dir.mkdir()
  (run_dir / "notes.txt").write_text("a user's own file: the folder held something before")
  done = subprocess.run([sys.executable, "tests/lra_probed.py", *args], cwd=ROOT, text=True,
                        capture_output=True, env=env)
  assert done.returncode == 2, done.stderr
  generating, line = done.stderr.splitlines()  # the data it makes for itself, then the error
  assert generating.startswith("listops: generating data"), done.stderr
  assert line.startswith("lra: error: out of memory in the train step ("), line
  assert "Out of memory allocating" in line and "XLA estimated " in line
  for setting in ("--config.train.grad_accum_steps=2", "--config.mixers.softmax.query_chunk=128"):
    assert setting in line, setting
  final = json.loads((run_dir / "final.json").read_text())
  assert final["status"] == "failed" and final["stop_reason"] == line[len("lra: error: "):]
  assert (run_dir / "notes.txt").exists()  # kept: it held something before


@pytest.mark.parametrize("mixer", ["softmax", "synthesizer"])
def test_the_quadratic_mixers_query_chunks_are_offered_until_set(mixer):
  from lra.machine import memory
  from lra.runs.config_loading import resolve_config
  offer = f"--config.mixers.{mixer}.query_chunk=128"
  assert offer in memory.shrinking_settings(resolve_config("listops", mixer, "paper"), "train",
                                            2, 1)
  chunked = resolve_config("listops", mixer, "laptop")  # the preset's own 128
  assert offer not in memory.shrinking_settings(chunked, "train", 2, 1)


def test_device_memory_is_read_with_units_and_a_bad_value_says_what_to_set(monkeypatch):
  import jax
  from lra.machine import memory
  monkeypatch.setenv("LRA_DEVICE_MEMORY", "1.5GiB")
  assert memory.device_bytes(jax.devices()[0]) == (3 * 2**29, "LRA_DEVICE_MEMORY")
  monkeypatch.setenv("LRA_DEVICE_MEMORY", "512 MB")
  assert memory.device_bytes(jax.devices()[0])[0] == 512 * 10**6
  monkeypatch.setenv("LRA_DEVICE_MEMORY", "lots")
  with pytest.raises(ValueError, match=r"LRA_DEVICE_MEMORY='lots': expected a size such as 20GiB, "
                     r"512MB or a number of bytes, e.g. LRA_DEVICE_MEMORY=20GiB"):
    memory.device_bytes(jax.devices()[0])
  monkeypatch.delenv("LRA_DEVICE_MEMORY")
  have, source = memory.device_bytes(jax.devices()[0])  # this CPU: the host's available RAM
  assert source == "available RAM" and 0 < have < os.sysconf("SC_PAGE_SIZE") * os.sysconf(
      "SC_PHYS_PAGES")


def _metrics_steps(run_dir):
  path = run_dir / "metrics.jsonl"
  lines = path.read_text().splitlines() if path.exists() else []
  return [json.loads(line)["step"] for line in lines if line.endswith("}")]


def test_slurm_array_script_sends_term_to_the_run_which_saves_and_resumes_when_requeued(
    data_dir, tmp_path):
  """The emitted script: SIGTERM before the time limit to the batch shell, which `exec` made the
  run itself; requeue. Run with bash as Slurm would, TERM to its pid stops the run `interrupted`
  with a checkpoint, and the same array task run again resumes from it."""
  from lra.cli import sweep
  jobs = sweep.plan(["listops"], ["softmax"], [0], preset="smoke", results_dir=tmp_path / "res",
                    data_dir=data_dir, overrides=["train.num_steps=100000"])
  script = tmp_path / "sweep.sbatch"
  script.write_text(sweep.slurm_script(jobs, python=sys.executable))
  text = script.read_text()
  assert f"#SBATCH --signal=B:TERM@{sweep.STOP_BEFORE_LIMIT_S}\n" in text
  assert "#SBATCH --requeue\n" in text and "#SBATCH --open-mode=append\n" in text
  assert text.rstrip().endswith('eval "exec ${COMMANDS[$SLURM_ARRAY_TASK_ID]}"')
  env = dict(os.environ, JAX_PLATFORMS="cpu", SLURM_ARRAY_TASK_ID="0",
             SLURM_SUBMIT_DIR=str(ROOT))
  run_dir, stopped_at = jobs[0].run_dir, 0
  for attempt in range(2):
    log = tmp_path / f"task_{attempt}.out"
    with open(log, "w") as out:
      task = subprocess.Popen(["bash", str(script)], env=env, stdout=out, stderr=out)
      try:
        _wait_for(lambda: any(s > stopped_at for s in _metrics_steps(run_dir)), task)
        task.send_signal(signal.SIGTERM)  # to the batch shell's pid, as --signal=B: does
        assert task.wait(timeout=120) == 130, log.read_text()
      finally:
        if task.poll() is None:
          task.kill()
    final = json.loads((run_dir / "final.json").read_text())
    assert final["status"] == "interrupted" and final["stop_reason"] == "SIGTERM"
    assert final["step"] > stopped_at and (run_dir / "checkpoints" / str(final["step"])).is_dir()
    if attempt:
      assert f"resuming {run_dir} from step {stopped_at}" in log.read_text()
    stopped_at = final["step"]


def test_an_error_during_training_is_failed_with_its_step_and_its_traceback_logged(
    data_dir, tmp_path, capsys, monkeypatch):
  from lra.training import train

  def broken_eval(*args, **kwargs):
    raise ZeroDivisionError("the eval broke")

  monkeypatch.setattr(train, "evaluate", broken_eval)
  run_dir = tmp_path / "run"
  assert main(["run", "listops", "softmax", *SMOKE, "--data-dir", str(data_dir), "--run-dir",
               str(run_dir), "--config.eval.every_steps=4"]) == 1  # a bug, not a mistake
  err = capsys.readouterr().err.strip()
  # Raised outside the suite (this file stands in for a user's code): the line names where.
  assert err.startswith("lra: error: ZeroDivisionError: the eval broke at ")
  assert " in broken_eval (the traceback is in " in err
  assert err.endswith(f"{run_dir / 'error.log'})") and "\n" not in err
  final = json.loads((run_dir / "final.json").read_text())
  assert final["status"] == "failed" and final["step"] == 4
  assert "in broken_eval" in (run_dir / "error.log").read_text()


def test_a_start_that_fails_before_training_leaves_the_folders_config_json_as_it_was(
    stopped_run, data_dir, tmp_path, monkeypatch):
  """A folder's config.json is the record of what its run trained: a resume that fails before
  its first step (a model that no longer restores, say) is recorded in final.json, but must not
  replace that record with the config of the command that failed."""
  from lra.training import train
  run_dir = tmp_path / "stopped"
  shutil.copytree(stopped_run[0], run_dir)
  config_path = run_dir / "config.json"
  # A key today's configs lack (as a key added later is missing from an old config): rewriting
  # the file with this command's config would drop it.
  config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "note": "kept"}))
  before = config_path.read_bytes()

  def broken_restore(*args, **kwargs):
    raise ValueError("the checkpoint's tree is not this model's")

  monkeypatch.setattr(train, "restore_or_init", broken_restore)
  with pytest.raises(train.RunFailed, match="tree is not this model's"):
    run.run("listops", "softmax", preset="smoke", overrides=DAMAGE_RUN, data_dir=data_dir,
            run_dir=run_dir, progress=False)
  assert config_path.read_bytes() == before
  assert json.loads((run_dir / "final.json").read_text())["status"] == "failed"
