"""The one progress meter, for long data work (generating, preparing: `Meter`) and for training
(`Steps`: step, loss, accuracy, steps/s, ETA), and the training rate that feeds it (`Throughput`).

On a terminal both draw a rich bar; off one (a log file, a batch job) they print plain lines: data
work one at each tenth, training one at each log point, so a log stays readable. Times are H:MM:SS,
with days past 24 hours ("1 d 03:12:05"). It lives in lra/base/, the room under every other, so
lra.tasks (data work) and the runner (training) share it. `quiet()` silences every meter inside it
(`lra run --quiet`).
"""
from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO, TypeVar

T = TypeVar("T")

DELAY_S = 1.0  # data work shorter than this shows nothing (smoke and demo data, tests)
EARLY_ETA_S = 10.0  # seconds of training before the first ETA, if no log point came sooner
_REFRESH_S = 0.1  # a data bar is redrawn at most this often, however often `advance` is called
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


def duration(seconds: float) -> str:
  """H:MM:SS, and the days before it past 24 hours: "0:08:43", "1 d 03:12:05"."""
  seconds = int(round(seconds))
  days, seconds = divmod(seconds, 86400)
  hours, minutes = seconds // 3600, seconds // 60 % 60
  clock = f"{hours:02d}:{minutes:02d}:{seconds % 60:02d}" if days else (
      f"{hours}:{minutes:02d}:{seconds % 60:02d}")
  return f"{days} d {clock}" if days else clock


def _rich_bar(stream: TextIO, *columns: Any):
  """A started rich Progress on `stream`, its time left in `duration`'s words."""
  from rich.console import Console  # deferred: a plain log never needs rich
  from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn
  from rich.text import Text

  class TimeLeft(ProgressColumn):
    """The caller's estimate (field `left`) when it has one, else rich's from the counts."""

    def render(self, task) -> Text:
      left = task.fields.get("left", task.time_remaining)
      return Text("ETA " + ("-:--:--" if left is None else duration(left)),
                  style="progress.remaining")

  bar = Progress(columns[0], BarColumn(), MofNCompleteColumn(), *columns[1:], TimeLeft(),
                 console=Console(file=stream, force_terminal=True), transient=False,
                 auto_refresh=False)
  bar.start()
  return bar


class Meter:
  """Counts data work done against a known total and shows it on stderr.

  On a terminal a rich bar (count, percentage, time left); otherwise one line at each tenth of the
  total, so a log holds at most ten. Nothing is shown before `delay` seconds (default DELAY_S)
  have passed. `scale` divides the counts for display (1e6 with unit "MB" for bytes).
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

  def __enter__(self) -> Meter:
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
      from rich.progress import TaskProgressColumn, TextColumn
      self._bar = _rich_bar(self._stream, TextColumn("{task.description}"),
                            TextColumn(self.unit), TaskProgressColumn())
      self._task = self._bar.add_task(self.label, total=self.total / self.scale,
                                      completed=self.done / self.scale)
      self.shown = True
    self._bar.update(self._task, completed=self.done / self.scale, refresh=True)

  def _line(self, now: float) -> None:
    self.shown = True
    elapsed = max(now - self._start, 1e-9)
    rate = self.done / elapsed
    left = max(self.total - self.done, 0) / max(rate, 1e-9)
    total = f"{self.total / self.scale:,.0f}"
    time_taken = (f"{duration(elapsed)} in all" if self._tenth == 10 else
                  f"{duration(left)} left")
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


class Steps:
  """Training's meter: step, loss, accuracy, steps/s and ETA at every log point (train.
  log_every_steps), and the run's messages (an evaluation, a stop) between them.

  Log points can be minutes apart on a CPU (the `laptop` preset: 50 steps of ~2 s), so a first
  estimate of the time left comes EARLY_ETA_S after training starts if no log point came before
  it. The ETA is the caller's rate (Throughput: evaluations excluded), not the bar's own.
  """

  def __init__(self, total: int, *, enabled: bool = True, stream: TextIO | None = None,
               tty: bool | None = None, clock: Callable[[], float] = time.monotonic):
    self.total = total
    self.enabled = enabled and not _silenced
    self._stream = stream or sys.stderr
    self._tty = self._stream.isatty() if tty is None else tty
    self.clock = clock
    self._began: float | None = None  # when training started (`start`)
    self._shown = False  # a line with an ETA was printed
    self._bar: Any = None  # the rich Progress, on a terminal, once shown

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
    self._update(step, f"{steps_per_s:.2f} steps/s", steps_per_s, "(first estimate)")

  def show(self, step: int, metrics: dict[str, float], steps_per_s: float) -> None:
    self._update(step, f"loss {metrics['train/loss']:.4f}  acc {metrics['train/accuracy']:.3f}  "
                 f"{steps_per_s:.2f} steps/s", steps_per_s)

  def message(self, text: str) -> None:
    """A line of its own (above the bar on a terminal)."""
    if not self.enabled:
      return
    if self._bar is not None:
      self._bar.console.print(text, markup=False, highlight=False, soft_wrap=True)
    else:
      print(text, file=self._stream, flush=True)

  def close(self) -> None:
    """Ends the bar, its last state left on screen (call it however training ends)."""
    if self._bar is not None:
      self._bar.stop()
      self._bar = None

  def _update(self, step: int, stats: str, steps_per_s: float, note: str = "") -> None:
    if not self.enabled:
      return
    self._shown = True
    left = (self.total - step) / max(steps_per_s, 1e-9)
    if not self._tty:
      print(f"step {step}/{self.total}  {stats}  ETA {duration(left)}{' ' * bool(note)}{note}",
            file=self._stream, flush=True)
      return
    if self._bar is None:
      from rich.progress import TextColumn
      self._bar = _rich_bar(self._stream, TextColumn("step"), TextColumn("{task.fields[stats]}"))
      self._task = self._bar.add_task("train", total=self.total, stats="", left=None)
    self._bar.update(self._task, completed=step, stats=stats + (f" {note}" if note else ""),
                     left=left, refresh=True)


class Throughput:
  """Training steps per second over one log window, evaluations excluded.

  Kept apart from the metrics window (lra.training.train.Book.window_steps): that one spans a
  resume and the steps before an evaluation, and dividing its step count by a clock restarted there
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
