"""The training run's live line (`Progress`: step, loss, accuracy, steps/s, ETA) and the meter
of training steps per second that feeds it (`Throughput`)."""
from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from typing import Callable, Iterator


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


@dataclasses.dataclass
class Progress:
  """One live line: step, loss, accuracy, steps/s, ETA."""
  total: int
  enabled: bool = True
  _tty: bool = dataclasses.field(default_factory=lambda: sys.stderr.isatty())

  def show(self, step: int, metrics: dict[str, float], steps_per_s: float) -> None:
    if not self.enabled:
      return
    eta = (self.total - step) / max(steps_per_s, 1e-9)
    line = (f"step {step}/{self.total}  loss {metrics['train/loss']:.4f}  "
            f"acc {metrics['train/accuracy']:.3f}  {steps_per_s:.2f} steps/s  "
            f"ETA {time.strftime('%H:%M:%S', time.gmtime(eta))}")
    print(("\r" + line + "   ") if self._tty else line, end="" if self._tty else "\n",
          file=sys.stderr, flush=True)

  def message(self, text: str) -> None:
    if self.enabled:
      print(("\n" if self._tty else "") + text, file=sys.stderr, flush=True)
