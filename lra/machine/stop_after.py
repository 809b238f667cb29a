"""`lra run --stop-after SECONDS`: stop cleanly before a wall-time limit (Slurm `--time`, a lease).

The limit counts from `STARTED`: when this process began (Linux: /proc/self/stat; elsewhere when
lra.cli, which imports this module first thing, was imported), or when `lra.cli.main` was called
with arguments of its own (a test, a notebook). Starting Python and JAX, reading the data and
compiling count against it as they do against a scheduler's limit, and are checked twice before
the first step (`Deadline.before_training`): before compiling (the compile guessed at what the
model's initialisation took) and after it (the first step guessed at its compile time). A run
whose start-up leaves no time for a step and its save stops there, untrained, and says so. After
every step the train loop asks `Deadline.should_stop(step)`, which says yes when the next steps
that would run, with the evaluations and checkpoints they bring, and then the stop's own save
might not end before the limit. The loop then stops as after Ctrl-C: a sealed checkpoint,
final.json `interrupted`, and the same command resumes.

Durations are measured as the run goes, per kind of step; what has not been seen yet is guessed
high (an evaluation before the first one: a step like the first plus its batches at the train
step's cost). Each batch length compiles its own program (per-batch and sorted padding: up to
ceil(T / pad_quantum) of them), the first when the step runs: while programs are left to meet,
the next step is budgeted a compile more per micro-batch (sorted padding cuts a batch into k,
each of its own length; at most the programs left), and a step that compiled any is kept out of
the step average. The host may dispatch steps ahead of the device, so the steps since the last log
point (where the loop waits for the device) count as still to be paid. With several processes a
stop request rides on the next step's batch and is read one step late (lra.training.train), so two
more steps run after the deadline asks: `lag=2` budgets them.
"""
from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable

from lra import errors

_clock = time.monotonic


def _process_age_s() -> float:
  """Seconds since this process started (Linux), or 0 where that cannot be read."""
  try:
    with open("/proc/self/stat") as f:
      fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
  except (OSError, ValueError, IndexError, AttributeError):  # not Linux
    return 0.0
  return age if 0.0 <= age < 600.0 else 0.0  # beyond that, not the `lra` command's own start


STARTED = _clock() - _process_age_s()


def command_started(as_command: bool) -> None:
  """Called first thing by lra.cli.main: the `lra` command counts from its process's start; a
  caller passing its own arguments (a test, a notebook) from this call."""
  global STARTED
  if not as_command:
    STARTED = _clock()
# A stop's save, until one has been timed: the state copied to the host and written.
FIRST_SAVE_GUESS_S = 5.0
MARGIN_S = 1.0  # final.json, closing the checkpointer, the process's exit


def check_limit(limit_s: float | None) -> None:
  """Raises ValueError (one line) unless `limit_s` is None or a positive number of seconds."""
  if limit_s is not None and not limit_s > 0:  # NaN fails too
    raise errors.BadValue(f"--stop-after takes a positive number of seconds, got {limit_s:g}: e.g. "
                          "--stop-after 3600 for an hour")


@dataclasses.dataclass(frozen=True)
class Schedule:
  """When the loop evaluates, saves and waits for the device (config.eval, .checkpoint, .train).

  Attributes:
    num_steps: the run's last step (always evaluated and saved).
    eval_every: steps between evaluations.
    checkpoint_every: steps between saves.
    log_every: steps between log points (the host waits for the device there).
    eval_batches_per_step: the work of one evaluation in train steps: val and test rows over the
      train batch size (a forward pass costs less than a train step: a guess on the high side).
  """
  num_steps: int
  eval_every: int
  checkpoint_every: int
  log_every: int
  eval_batches_per_step: float = 0.0

  def evaluates(self, step: int) -> bool:
    return step % self.eval_every == 0 or step == self.num_steps

  def saves(self, step: int) -> bool:
    return step % self.checkpoint_every == 0 or step == self.num_steps

  def syncs(self, step: int) -> bool:
    return step % self.log_every == 0 or self.evaluates(step) or self.saves(step)


class Deadline:
  """Whether to stop after a step so that the run ends before `limit_s` seconds from `started`.

  Args:
    limit_s: the wall-time limit, seconds from `started`.
    schedule: the run's evaluation, checkpoint and log steps.
    started: when the clock began (default: STARTED, when the `lra` command started).
    clock: monotonic seconds (default: the module's `_clock`, time.monotonic).
    lag: steps that still run after a stop is asked for: 0 with one process; 2 with several
      (the request rides on the next step's batch, whose flag is read one step late).
  """

  def __init__(self, limit_s: float, schedule: Schedule, *, started: float | None = None,
               clock: Callable[[], float] | None = None, lag: int = 0):
    check_limit(limit_s)
    self.limit_s, self.schedule, self.lag = float(limit_s), schedule, lag
    self.clock = clock or (lambda: _clock())  # looked up when called: tests replace it
    self.started = STARTED if started is None else started
    self._last: float | None = None  # when the previous step ended
    self._plain = [0.0, 0]  # seconds and count of steps with no evaluation or save, paid
    self._pending = [0.0, 0]  # the same since the last log point: maybe only dispatched
    self.first_s: float | None = None  # the first step of this process
    self.unseen_s = 0.0  # the first step, before it ran: guessed (before_training)
    self.eval_s: float | None = None  # the latest evaluation, beyond its step
    self.save_s: float | None = None  # the latest save, beyond its step
    self.both_s: float | None = None  # the latest step that did both
    self._synced = 0  # the last step at which the host waited for the device
    self.compile_s = 0.0  # one training program's compile (the first, timed before the loop)
    self.programs_left = 0  # training programs the run may still meet (batch lengths not seen)
    self.per_step = 1  # the most a step can meet: its micro-batches, each padded to its own
    self._compiled: set[int] = set()  # steps that compiled a program: not a typical step
    self.reason = f"--stop-after {self.limit_s:g} s"

  def start(self, step: int) -> None:
    """The loop begins at `step` (0, or the resumed one): the first step is timed from here."""
    self._last, self._synced = self.clock(), step

  def step_s(self) -> float:
    """The typical train step: plain steps up to the last log point, where the host waited for
    the device (before one, the steps so far; before any, the first step, or its guess)."""
    for seconds, count in (self._plain, self._pending):
      if count:
        return seconds / count
    return self.unseen_s if self.first_s is None else self.first_s

  def programs(self, count: int, compile_s: float, per_step: int = 1) -> None:
    """The run will meet up to `count` training programs (its first compiled already, in
    `compile_s`), up to `per_step` in one step (its micro-batches, each of its own length):
    each other one costs the step that meets it about as much again."""
    self.programs_left, self.compile_s = max(count - 1, 0), compile_s
    self.per_step = max(per_step, 1)

  def compiled(self, step: int, count: int = 1) -> None:
    """Step `step` met `count` batch lengths not seen before: it compiled that many programs."""
    self.programs_left = max(self.programs_left - count, 0)
    self._compiled.add(step)

  def _record(self, step: int, took: float) -> None:
    if self.first_s is None:
      self.first_s = took
      return
    if step in self._compiled:  # a compile, not a step: neither the step nor its extras
      self._compiled.discard(step)
      return
    evaluates, saves = self.schedule.evaluates(step), self.schedule.saves(step)
    if not (evaluates or saves):
      self._pending[0] += took
      self._pending[1] += 1
      if self.schedule.syncs(step):  # the device caught up: these steps are paid in full
        self._plain = [self._plain[0] + self._pending[0], self._plain[1] + self._pending[1]]
        self._pending = [0.0, 0]
      return
    # An evaluation or save also pays for steps queued before it: those leave the step average.
    self._pending = [0.0, 0]
    extra = max(took - self.step_s(), 0.0)
    if evaluates and saves:  # timed together: neither part on its own
      self.both_s = extra
    elif evaluates:
      self.eval_s = extra
    else:
      self.save_s = extra

  def next_cost_s(self, step: int) -> float:
    """The seconds to run the steps after `step` that would run if the loop went on now (step + 1,
    and the `lag` steps a stop asked for after it would still run) with their evaluations and
    saves, and then to stop."""
    step_s = self.step_s()
    # Not timed yet: an evaluation, a step like the first plus its batches at the train step's
    # cost (before any step, the first step's guess); a save, FIRST_SAVE_GUESS_S.
    if self.eval_s is not None or self.both_s is not None:
      eval_s = self.eval_s if self.eval_s is not None else self.both_s
    elif self.first_s is None:
      eval_s = self.unseen_s
    else:
      eval_s = self.first_s + self.schedule.eval_batches_per_step * step_s
    save_s = self.save_s if self.save_s is not None else FIRST_SAVE_GUESS_S
    cost = 0.0
    for following in range(step + 1, min(step + 1 + self.lag, self.schedule.num_steps) + 1):
      evaluates, saves = self.schedule.evaluates(following), self.schedule.saves(following)
      cost += step_s
      if evaluates and saves:
        cost += self.both_s if self.both_s is not None else eval_s + save_s
      elif evaluates:
        cost += eval_s
      elif saves:
        cost += save_s
    unpaid = step - self._synced  # dispatched since the device last caught up
    # The next step may meet batch lengths not compiled yet: one per micro-batch at most.
    cost += self.compile_s * min(self.per_step, self.programs_left)
    # The stop: the steps the device has not run yet, a save, its write finishing.
    return cost + unpaid * step_s + 2 * save_s + MARGIN_S

  def before_training(self, step: int, ahead_s: float, first_step_s: float,
                      done: str) -> str | None:
    """Before the loop's first step: None when `ahead_s` more seconds of start-up (compiling),
    a first step guessed at `first_step_s` (with what comes after it, as `next_cost_s`) and a stop
    still end by the limit; otherwise the line that says why the run stops before training.
    `done` names what the start-up did so far ("JAX, the data, the model")."""
    self._synced, self.unseen_s = step, first_step_s
    elapsed = self.clock() - self.started
    need = elapsed + ahead_s + self.next_cost_s(step)
    if need <= self.limit_s:
      return None
    return (f"{self.reason}: the start-up took {elapsed:.1f} s ({done}), and "
            f"{'compiling, ' if ahead_s else ''}a first step and a save need about "
            f"{need - elapsed:.0f} s more: stopped before training, nothing trained in this "
            f"command; allow more than {need:.0f} s")

  def should_stop(self, step: int) -> bool:
    """Called after step `step` (its evaluation and save included): stop now?"""
    now = self.clock()
    if self._last is not None:
      self._record(step, now - self._last)
    self._last = now
    if self.schedule.syncs(step):
      self._synced = step
    return now - self.started + self.next_cost_s(step) > self.limit_s


def for_run(limit_s: float, config, eval_rows: int, lag: int = 0) -> Deadline:
  """The deadline of a run with this config (an ml_collections ConfigDict) whose evaluations
  read `eval_rows` val and test rows; `lag` as Deadline's."""
  tc = config.train
  return Deadline(limit_s, Schedule(
      num_steps=tc.num_steps, eval_every=config.eval.every_steps,
      checkpoint_every=config.checkpoint.every_steps, log_every=tc.log_every_steps,
      eval_batches_per_step=eval_rows / tc.batch_size), lag=lag)
