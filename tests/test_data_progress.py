"""Progress of data generation and preparation: a line at each tenth off a terminal, a bar on one,
nothing for quick work or under `quiet()`."""
import io
import re

from lra.base import progress
from lra.tasks.generators import listops as listops_generator


class Clock:
  def __init__(self):
    self.now = 0.0

  def __call__(self):
    return self.now


def _meter(stream, clock, **kwargs):
  return progress.Meter("listops: generating", 100, "examples", stream=stream, clock=clock,
                        **kwargs)


def test_a_log_gets_one_line_per_tenth_ending_at_the_total():
  stream, clock = io.StringIO(), Clock()
  with _meter(stream, clock, tty=False) as meter:
    for _ in range(100):
      clock.now += 0.1  # 10 s in all: long enough to be shown
      meter.advance()
  lines = stream.getvalue().splitlines()
  percents = [int(re.search(r"\((\d+)%\)", line)[1]) for line in lines]
  assert percents == [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]  # each tenth once
  assert lines[-1].startswith("listops: generating: 100/100 examples (100%), 10.0 examples/s")


def test_quick_work_shows_nothing():
  stream, clock = io.StringIO(), Clock()
  for tty in (False, True):
    with _meter(stream, clock, tty=tty) as meter:
      for _ in range(100):
        clock.now += 0.001
        meter.advance()
  assert stream.getvalue() == ""


def test_a_terminal_gets_a_bar():
  stream, clock = io.StringIO(), Clock()
  with _meter(stream, clock, tty=True) as meter:
    for _ in range(100):
      clock.now += 0.5
      meter.advance()
  shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())  # without terminal codes
  assert "listops: generating" in shown and "100/100" in shown and "━" in shown


def test_quiet_silences_every_meter_inside():
  stream, clock = io.StringIO(), Clock()
  with progress.quiet():
    with _meter(stream, clock, tty=False) as meter:
      clock.now += 5
      meter.advance(100)
  assert stream.getvalue() == ""
  with progress.quiet(False), _meter(stream, clock, tty=False) as meter:
    clock.now += 5
    meter.advance(100)
  assert "(100%)" in stream.getvalue()


def test_a_loop_left_early_does_not_claim_its_total(monkeypatch, capsys):
  monkeypatch.setattr(progress, "DELAY_S", 0.0)
  seen = []
  for item in progress.tracked(range(10), "retrieval: tokenising train", 10, "pairs"):
    seen.append(item)
    if item == 4:
      break
  err = capsys.readouterr().err
  assert seen == [0, 1, 2, 3, 4]
  assert "(40%)" in err and "100%" not in err  # the fifth item was never finished


def test_the_listops_generator_reports_off_a_terminal(monkeypatch, capsys):
  monkeypatch.setattr(progress, "DELAY_S", 0.0)
  examples = listops_generator.generate_examples(20, min_length=5, max_length=40, max_depth=3,
                                                 progress=True)
  assert len(examples) == 20
  lines = capsys.readouterr().err.splitlines()
  assert len(lines) == 10 and lines[-1].startswith("listops: generating: 20/20 examples (100%)")
