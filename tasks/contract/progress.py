"""Progress of long data work (generating, preparing): a bar on a terminal, a plain line at every
tenth otherwise (a log file, a batch job), nothing for work that ends within a second.

It lives beside the data contract because lra.tasks never imports the runner; the runner's own
training line is lra/progress.py. `quiet()` silences every meter inside it (`lra run --quiet`).
"""
from __future__ import annotations

import contextlib
import sys
import time
from typing import Any, Callable, Iterable, Iterator, TextIO, TypeVar

T = TypeVar("T")

DELAY_S = 1.0  # work shorter than this shows nothing (smoke and demo data, tests)
_REFRESH_S = 0.1  # the bar is redrawn at most this often, however often `advance` is called
_silenced = 0


@contextlib.contextmanager
def quiet(silent: bool = True) -> Iterator[None]:
  """Meters opened inside show nothing (when `silent`)."""
  global _silenced
  _silenced += bool(silent)
  try:
    yield
  finally:
    _silenced -= bool(silent)


class Meter:
  """Counts work done against a known total and shows it on stderr.

  On a terminal a rich bar (count, percentage, rate, time left); otherwise one line at each tenth
  of the total, so a log holds at most ten. Nothing is shown before `delay` seconds (default
  DELAY_S) have passed.
  `scale` divides the counts for display (1e6 with unit "MB" for bytes).
  """

  def __init__(self, label: str, total: float, unit: str = "", *, scale: float = 1.0,
               enabled: bool = True, stream: TextIO | None = None, tty: bool | None = None,
               delay: float | None = None, clock: Callable[[], float] = time.monotonic):
    self.label, self.total, self.unit, self.scale = label, max(float(total), 1e-9), unit, scale
    self.enabled = enabled and not _silenced
    self._stream = stream or sys.stderr
    self._tty = self._stream.isatty() if tty is None else tty
    self._delay, self._clock = DELAY_S if delay is None else delay, clock
    self._start = self._last_draw = clock()
    self.done = 0.0
    self._tenth = 0  # tenths already reported as lines
    self._bar: Any = None  # the rich Progress, once shown
    self.shown = False

  def __enter__(self) -> "Meter":
    return self

  def __exit__(self, kind, *_) -> None:
    self.close(finished=kind is None)

  def advance(self, n: float = 1) -> None:
    self.done += n
    if not self.enabled:
      return
    now = self._clock()
    if now - self._start < self._delay:
      return
    if self._tty:
      if now - self._last_draw >= _REFRESH_S or self.done >= self.total:
        self._last_draw = now
        self._draw_bar()
    else:
      tenth = min(int(10 * self.done / self.total), 10)
      if tenth > self._tenth:
        self._tenth = tenth
        self._line(now)

  def close(self, finished: bool = True) -> None:
    """Ends the bar (its last state stays on screen); a shown line meter ends at its total."""
    if self._bar is not None:
      self._draw_bar()
      self._bar.stop()
      self._bar = None
    elif self.shown and finished and self._tenth < 10:
      self._tenth = 10
      self._line(self._clock())

  def _draw_bar(self) -> None:
    if self._bar is None:
      from rich.console import Console  # deferred: a plain log never needs rich
      from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn,
                                 TextColumn, TimeRemainingColumn)
      self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TextColumn(self.unit), TaskProgressColumn(), TimeRemainingColumn(),
                           console=Console(file=self._stream, force_terminal=True),
                           transient=False)
      self._task = self._bar.add_task(self.label, total=self.total / self.scale,
                                      completed=self.done / self.scale)
      self._bar.start()
      self.shown = True
    self._bar.update(self._task, completed=self.done / self.scale)

  def _line(self, now: float) -> None:
    self.shown = True
    elapsed = max(now - self._start, 1e-9)
    rate = self.done / elapsed
    left = max(self.total - self.done, 0) / max(rate, 1e-9)
    total = f"{self.total / self.scale:,.0f}"
    time_taken = (f"{_duration(elapsed)} in all" if self._tenth == 10 else
                  f"{_duration(left)} left")
    print(f"{self.label}: {self.done / self.scale:,.0f}/{total} {self.unit} "
          f"({10 * self._tenth}%), {rate / self.scale:,.1f} {self.unit}/s, {time_taken}",
          file=self._stream, flush=True)


def tracked(items: Iterable[T], label: str, total: float, unit: str, *,
            size: Callable[[T], float] = lambda item: 1, enabled: bool = True) -> Iterator[T]:
  """Yields `items`, counting each one's `size` on a Meter once the loop body has finished it."""
  with Meter(label, total, unit, enabled=enabled) as meter:
    for item in items:
      yield item
      meter.advance(size(item))


def _duration(seconds: float) -> str:
  seconds = int(round(seconds))
  return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
