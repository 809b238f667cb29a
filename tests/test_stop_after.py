"""`lra run --stop-after`: the deadline's estimates on a scripted clock, and a real run that stops
before its limit, resumably."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lra.machine import stop_after
from lra.tasks.contract.batches import Batching

ROOT = Path(__file__).resolve().parents[1]


class Script:
  """A clock the test moves: each step of a loop takes what the script says."""

  def __init__(self, now: float):
    self.now = now

  def __call__(self) -> float:
    return self.now


def _loop(deadline, clock, schedule, cost, lag=0):
  """Steps until the deadline says stop and then `lag` more (a stop seen late, as with several
  processes); returns (step, time) at the stop, or None."""
  deadline.start(0)
  asked = None
  for step in range(1, schedule.num_steps + 1):
    clock.now += cost(step)
    if deadline.should_stop(step) and asked is None:
      asked = step
    if asked is not None and step == asked + lag:
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


@pytest.mark.parametrize("limit", [60.0, 75.0, 90.0, 200.0])
def test_several_processes_budget_the_steps_a_stop_takes_to_land(limit):
  # With several processes a stop asked for after step k lands after step k + 2: the deadline
  # budgets those two steps, their evaluations and saves, and the step after the next decision.
  schedule = stop_after.Schedule(num_steps=1000, eval_every=10, checkpoint_every=15, log_every=1,
                                 eval_batches_per_step=2.0)
  clock = Script(10.0)
  deadline = stop_after.Deadline(limit, schedule, started=0.0, clock=clock, lag=2)
  stop, when = _loop(deadline, clock, schedule, _cost(schedule), lag=2)
  assert when + 2.0 <= limit, (stop, when)  # its save (2 s) done by the limit
  if limit > 50:  # not early: asked one step later, it would have landed past the limit
    assert deadline.save_s == 2.0 and deadline.eval_s == 3.0
    later = when + _cost(schedule)(stop + 1)
    assert later + 2 * 2.0 + stop_after.MARGIN_S > limit, (stop, when)


def test_a_start_up_that_leaves_no_room_stops_before_the_first_step():
  schedule = stop_after.Schedule(num_steps=1000, eval_every=1000, checkpoint_every=1000,
                                 log_every=1)
  clock = Script(12.0)  # 12 s of start-up so far
  deadline = stop_after.Deadline(40.0, schedule, started=0.0, clock=clock)
  stop_cost = 2 * stop_after.FIRST_SAVE_GUESS_S + stop_after.MARGIN_S
  # Before compiling: 12 s, compiling and a first step guessed at 5 s each, then the stop.
  assert 12.0 + 5.0 + 5.0 + stop_cost <= 40.0
  assert deadline.before_training(0, 5.0, 5.0, "JAX, the data, the model") is None
  clock.now = 26.0  # compiling took 14 s: a first step guessed at that is past the limit
  late = deadline.before_training(0, 0.0, 14.0, "JAX, the data, compiling")
  need = 26.0 + 14.0 + stop_cost
  assert late == (f"--stop-after 40 s: the start-up took 26.0 s (JAX, the data, compiling), and a "
                  f"first step and a save need about {need - 26.0:.0f} s more: stopped before "
                  f"training, nothing trained in this command; allow more than {need:.0f} s")


def test_the_command_counts_from_its_process_start():
  # Python, its imports and whatever ran before lra.cli count against the limit, as they do
  # against a scheduler's; a caller passing its own arguments to lra.cli.main counts from there.
  code = ("import time; time.sleep(1.5); from lra.machine import stop_after; "
          "print(stop_after._clock() - stop_after.STARTED)")
  counted = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 check=True).stdout)
  if not Path("/proc/self/stat").exists():
    pytest.skip("the process's start is read from /proc (Linux)")
  assert 1.5 <= counted < 30  # 30: a loaded machine's slow start
  stop_after.command_started(as_command=False)
  assert stop_after._clock() - stop_after.STARTED < 1.0


def test_a_run_whose_start_up_exceeds_its_limit_trains_nothing_and_says_so(tmp_path):
  # Starting Python and JAX and making the data take more than 2 s: the run stops before it
  # compiles its steps, with one line that says what took the time, instead of compiling and
  # training a step past the limit. The budget counts from the process's start.
  limit = 2
  began = time.monotonic()
  proc = subprocess.run(
      [sys.executable, "-m", "lra", "run", "listops", "softmax", "--preset", "smoke", "--quiet",
       "--data-dir", str(tmp_path / "data"), "--run-dir", str(tmp_path / "run"),
       "--stop-after", str(limit)], cwd=ROOT, capture_output=True, text=True, timeout=600)
  wall = time.monotonic() - began
  assert proc.returncode == 130, proc.stderr
  line = next(x for x in proc.stderr.splitlines() if x.startswith("lra: "))
  assert line.startswith(f"lra: --stop-after {limit} s: the start-up took ")
  assert "(JAX, the data, the model)" in line and "nothing trained in this command" in line
  startup = float(line.split("the start-up took ")[1].split(" s")[0])
  final = json.loads((tmp_path / "run" / "final.json").read_text())
  assert final["status"] == "interrupted" and final["step"] == 0
  assert final["stop_reason"] == line.removeprefix("lra: ")
  assert not (tmp_path / "run" / "checkpoints").exists() or not any(
      p.name.isdigit() for p in (tmp_path / "run" / "checkpoints").iterdir())
  # Ended soon after it found the limit past: final.json, the summary and the exit, within 5 s
  # (a loaded machine), not a compile and a step later.
  assert wall <= startup + 5.0, (wall, startup)


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
  # minute on 2 loaded cores), or the run stops before training (the test above).
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
  assert "saved: `lra run " in proc.stdout and "` resumes it from this step" in proc.stdout
  steps = [int(p.name) for p in (tmp_path / "run" / "checkpoints").iterdir() if p.name.isdigit()]
  assert max(steps) == final["step"]


def test_programs_not_yet_compiled_are_budgeted_and_their_steps_are_not_typical():
  """Per-batch padding compiles a program per batch length at its first step: while lengths are
  left to meet, the next step may cost a compile more; the step that compiled one is not a
  typical step (it would raise the average every later estimate uses)."""
  schedule = stop_after.Schedule(num_steps=1000, eval_every=500, checkpoint_every=500,
                                 log_every=1)
  clock = Script(0.0)
  deadline = stop_after.Deadline(1000.0, schedule, started=0.0, clock=clock)
  deadline.programs(3, compile_s=30.0)
  deadline.start(0)
  costs = []
  for step, took in enumerate((2.0, 1.0, 31.0, 1.0, 31.0, 1.0), start=1):
    clock.now += took
    if took > 30:
      deadline.compiled(step)
    deadline.should_stop(step)
    costs.append(deadline.next_cost_s(step))
  assert deadline.step_s() == 1.0  # the compiling steps left out
  assert costs[1] - costs[-1] == pytest.approx(30.0)  # two lengths left, then none
  assert deadline.programs_left == 0


def test_sorted_micro_batches_budget_a_compile_per_micro_batch():
  """Sorted padding pads each of a step's k micro-batches to its own length: the next step may
  compile k programs (no more than are left), and one step that met three is counted as three."""
  schedule = stop_after.Schedule(num_steps=1000, eval_every=500, checkpoint_every=500,
                                 log_every=1)
  deadline = stop_after.Deadline(1000.0, schedule, started=0.0, clock=Script(0.0))
  deadline.programs(6, compile_s=30.0, per_step=4)
  deadline.start(0)
  before = deadline.next_cost_s(1)  # 4 of the 5 left budgeted
  deadline.compiled(1, 3)  # 5 left -> 2: at most 2 next time
  assert deadline.programs_left == 2
  assert before - deadline.next_cost_s(1) == pytest.approx(2 * 30.0)
  assert Batching(padding="sorted", micro_batches=4).programs_per_step == 4
  assert Batching(padding="batch", micro_batches=4).programs_per_step == 1
