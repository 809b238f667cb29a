"""`lra run --stop-after`: the deadline's estimates on a scripted clock, and a real run that stops
before its limit, resumably."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lra import stop_after

ROOT = Path(__file__).resolve().parents[1]


class Script:
  """A clock the test moves: each step of a loop takes what the script says."""

  def __init__(self, now: float):
    self.now = now

  def __call__(self) -> float:
    return self.now


def _loop(deadline, clock, schedule, cost):
  """Steps until the deadline says stop; returns (step, time) at the stop, or None."""
  deadline.start(0)
  for step in range(1, schedule.num_steps + 1):
    clock.now += cost(step)
    if deadline.should_stop(step):
      return step, clock.now
  return None


def _cost(schedule, first=5.0, plain=1.0, evaluation=3.0, save=2.0):
  def cost(step):
    seconds = first if step == 1 else plain
    seconds += evaluation if schedule.evaluates(step) else 0.0
    return seconds + (save if schedule.saves(step) else 0.0)
  return cost


@pytest.mark.parametrize("limit", [30.0, 47.0, 61.0, 90.0])
def test_the_stop_leaves_room_for_its_save_and_comes_late_enough(limit):
  # A log point every step: the host never runs ahead here (the next test is about that).
  schedule = stop_after.Schedule(num_steps=1000, eval_every=10, checkpoint_every=15, log_every=1,
                                 eval_batches_per_step=2.0)
  clock = Script(10.0)  # 10 s of startup before the loop
  deadline = stop_after.Deadline(limit, schedule, started=0.0, clock=clock)
  stop, when = _loop(deadline, clock, schedule, _cost(schedule))
  # The stop saves (2 s) and closes: done by the limit.
  assert when + 2.0 <= limit
  # Not early: once a save and an evaluation have been timed, one more step (with what it brings)
  # and then the stop's reserve (twice the save, a second) would have passed the limit.
  if limit > 50:  # by then an evaluation (step 10) and a save (step 15) have been timed
    assert deadline.save_s == 2.0 and deadline.eval_s == 3.0
    following = _cost(schedule)(stop + 1)
    assert when + following + 2 * 2.0 + stop_after.MARGIN_S > limit, (stop, when)


def test_an_unseen_evaluation_is_guessed_high():
  schedule = stop_after.Schedule(num_steps=1000, eval_every=10, checkpoint_every=1000,
                                 log_every=1, eval_batches_per_step=8.0)
  clock = Script(0.0)
  deadline = stop_after.Deadline(1000.0, schedule, started=0.0, clock=clock)
  deadline.start(0)
  for step in range(1, 10):
    clock.now += 5.0 if step == 1 else 1.0
    deadline.should_stop(step)
  # Step 10 evaluates, never seen: a compile like the first step's (5 s) and 8 steps of work.
  guess = 1.0 + 5.0 + 8.0
  stop_cost = 2 * stop_after.FIRST_SAVE_GUESS_S + stop_after.MARGIN_S
  assert deadline.next_cost_s(9) == pytest.approx(guess + stop_cost)
  clock.now += 1.0 + 2.5  # the evaluation took 2.5 s: from now on that is what it costs
  deadline.should_stop(10)
  for step in range(11, 20):
    clock.now += 1.0
    deadline.should_stop(step)
  assert deadline.next_cost_s(19) == pytest.approx(1.0 + 2.5 + stop_cost)


def test_steps_dispatched_ahead_of_the_device_are_counted_as_unpaid():
  # The host queues steps in 0.01 s and waits for the device at each log point (every 10).
  schedule = stop_after.Schedule(num_steps=1000, eval_every=1000, checkpoint_every=1000,
                                 log_every=10)
  clock = Script(0.0)
  deadline = stop_after.Deadline(1000.0, schedule, started=0.0, clock=clock)
  deadline.start(0)
  for step in range(1, 26):
    clock.now += 9.91 if step % 10 == 0 else 0.01
    deadline.should_stop(step)
  assert deadline.step_s() == pytest.approx(1.0, rel=0.1)
  stop_cost = 2 * stop_after.FIRST_SAVE_GUESS_S + stop_after.MARGIN_S
  # Step 26 follows 5 steps the device may not have run yet (21-25).
  assert deadline.next_cost_s(25) == pytest.approx(deadline.step_s() * 6 + stop_cost)


def test_a_limit_that_is_not_a_positive_number_is_one_line(capsys):
  from lra.cli import main
  assert main(["run", "listops", "softmax", "--preset", "smoke", "--stop-after", "0"]) == 2
  err = capsys.readouterr().err
  assert err == ("lra: error: --stop-after takes a positive number of seconds, got 0: e.g. "
                 "--stop-after 3600 for an hour\n")


@pytest.mark.slow
def test_a_real_run_stops_before_its_limit_and_says_why(tmp_path):
  # Slow: the limit must leave room for starting JAX, making the data and compiling (over a
  # minute on 2 loaded cores), or the run can only stop after its first step, past the limit.
  limit = 120
  began = time.time()
  proc = subprocess.run(
      [sys.executable, "-m", "lra", "run", "listops", "softmax", "--preset", "smoke", "--quiet",
       "--data-dir", str(tmp_path / "data"), "--run-dir", str(tmp_path / "run"),
       "--stop-after", str(limit), "--config.train.num_steps=1000000"],
      cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 130, proc.stderr
  final_path = tmp_path / "run" / "final.json"
  final = json.loads(final_path.read_text())
  assert final["status"] == "interrupted" and final["stop_reason"] == f"--stop-after {limit} s"
  assert final["step"] > 1  # it trained, then stopped
  # final.json is the run's last write; the limit counts from the command's start, which comes
  # after Python's own (a few seconds on a loaded machine).
  assert final_path.stat().st_mtime - began < limit + 5, final_path.stat().st_mtime - began
  assert "saved: the same command resumes it" in proc.stdout
  steps = [int(p.name) for p in (tmp_path / "run" / "checkpoints").iterdir() if p.name.isdigit()]
  assert max(steps) == final["step"]
