"""The training run's live line (`Progress`: step, loss, accuracy, steps/s, ETA) and the meter
of training steps per second that feeds it (`Throughput`).

The line comes at every log point (train.log_every_steps), which on a CPU can be minutes apart
(the `laptop` preset: 50 steps of ~2 s); so a first estimate of the time left comes `EARLY_ETA_S`
after training starts if no log point came before it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from typing import Callable, Iterator

EARLY_ETA_S = 10.0  # seconds of training before the first ETA, if no log point came sooner


class Throughput:
  """Training steps per second over one log window, evaluations excluded.

  Kept apart from the metrics window (lra.train.Book.window_steps): that one spans a resume and
  the steps before an evaluation, and dividing its step count by a clock restarted there
  overstated the rate (by 5x in the window after an evaluation that fell 10 steps into a 50-step
  window).
  """

  def __init__(self, clock: Callable[[], float] = time.time):
    self._clock = clock
    self.restart()

  def restart(self) -> None:
    self._start, self._steps = self._clock(), 0

  def step(self) -> None:
    self._steps += 1

  @contextlib.contextmanager
  def paused(self) -> Iterator[None]:
    """Time spent inside (an evaluation) counts neither as steps nor as time."""
    began = self._clock()
    try:
      yield
    finally:
      self._start += self._clock() - began

  def rate(self) -> float:
    return self._steps / max(self._clock() - self._start, 1e-9)


def eta_text(seconds: float) -> str:
  """H:MM:SS, hours uncapped ("208:20:00" for a paper row on a CPU)."""
  seconds = int(round(seconds))
  return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


@dataclasses.dataclass
class Progress:
  """One live line: step, loss, accuracy, steps/s, ETA."""
  total: int
  enabled: bool = True
  _tty: bool = dataclasses.field(default_factory=lambda: sys.stderr.isatty())
  clock: Callable[[], float] = time.monotonic
  _began: float | None = None  # when training started (`start`)
  _shown: bool = False  # a line with an ETA was printed

  def start(self) -> None:
    """Training begins (compiling done): the early estimate is timed from here."""
    self._began = self.clock()

  def estimate_due(self) -> bool:
    """Whether the loop should wait for the device and give a first ETA (`estimate`) now: none
    was shown yet and EARLY_ETA_S have passed since `start`."""
    return (self.enabled and not self._shown and self._began is not None
            and self.clock() - self._began >= EARLY_ETA_S)

  def estimate(self, step: int, steps_per_s: float) -> None:
    """The first ETA, before the first log point (no loss yet)."""
    self._line(f"step {step}/{self.total}  {steps_per_s:.2f} steps/s  ETA "
               f"{eta_text((self.total - step) / max(steps_per_s, 1e-9))} (first estimate)")

  def show(self, step: int, metrics: dict[str, float], steps_per_s: float) -> None:
    self._line(f"step {step}/{self.total}  loss {metrics['train/loss']:.4f}  "
               f"acc {metrics['train/accuracy']:.3f}  {steps_per_s:.2f} steps/s  "
               f"ETA {eta_text((self.total - step) / max(steps_per_s, 1e-9))}")

  def _line(self, line: str) -> None:
    if not self.enabled:
      return
    self._shown = True
    print(("\r" + line + "   ") if self._tty else line, end="" if self._tty else "\n",
          file=sys.stderr, flush=True)

  def message(self, text: str) -> None:
    if self.enabled:
      print(("\n" if self._tty else "") + text, file=sys.stderr, flush=True)
