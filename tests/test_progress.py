"""Training's meter (lra.base.progress.Steps): an ETA at every log point, right past a
day, and a first estimate early when log points are far apart (a CPU run's first log point can be
minutes in); a rich bar on a terminal, plain lines in a log."""
import io
import re

from lra import run
from lra.base import progress


class Clock:
  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now


def test_the_eta_counts_days_past_24_hours():
  assert progress.duration(59.4) == "0:00:59"
  assert progress.duration(23 * 3600 + 59 * 60 + 59) == "23:59:59"
  assert progress.duration(86400) == "1 d 00:00:00"
  assert progress.duration(86400 + 3 * 3600 + 12 * 60 + 5) == "1 d 03:12:05"
  assert progress.duration(75_000 / 0.1) == "8 d 16:20:00"  # a paper row on a CPU: 750,000 s


def test_a_first_estimate_comes_early_and_once(capsys):
  clock = Clock()
  bar = progress.Steps(4000, tty=False, clock=clock)
  assert not bar.estimate_due()  # training has not started: compiling is not timed
  bar.start()
  clock.now += progress.EARLY_ETA_S - 0.5
  assert not bar.estimate_due()
  clock.now += 1.0
  assert bar.estimate_due()
  bar.estimate(75, 7.5)  # 3,925 steps left at 7.5 steps/s: 523 s
  assert capsys.readouterr().err == "step 75/4000  7.50 steps/s  ETA 0:08:43 (first estimate)\n"
  assert not bar.estimate_due()  # once: the log points take over
  quiet = progress.Steps(4000, enabled=False, tty=False, clock=clock)
  quiet.start()
  clock.now += 60
  assert not quiet.estimate_due()


def test_a_run_whose_log_points_are_far_apart_prints_an_eta_before_them(tmp_path, capsys,
                                                                         monkeypatch):
  monkeypatch.setattr(progress, "EARLY_ETA_S", 0.0)  # due at the first step
  run.run("listops", "softmax", preset="smoke", data_dir=tmp_path / "data",
          run_dir=tmp_path / "run", overrides=["train.log_every_steps=1000"])
  lines = capsys.readouterr().err.splitlines()
  etas = [line for line in lines if " ETA " in line]
  assert len(etas) == 2, lines  # the first estimate, then the last step's log point
  assert etas[0].startswith("step 1/6  ") and etas[0].endswith("(first estimate)")
  assert etas[1].startswith("step 6/6  loss ")


def test_a_log_gets_a_plain_line_per_log_point_and_a_terminal_a_rich_bar():
  metrics = {"train/loss": 0.6931, "train/accuracy": 0.5}
  log = io.StringIO()
  steps = progress.Steps(1_000_000, tty=False, stream=log)
  steps.show(50, metrics, 0.5)
  steps.message("step 50: val accuracy 0.5000")
  steps.close()
  assert log.getvalue().splitlines() == [
      "step 50/1000000  loss 0.6931  acc 0.500  0.50 steps/s  ETA 23 d 03:31:40",  # 1,999,900 s
      "step 50: val accuracy 0.5000"]
  screen = io.StringIO()
  steps = progress.Steps(4000, tty=True, stream=screen)
  steps.show(2000, metrics, 7.5)
  steps.message("step 2000: val accuracy 0.5000")
  steps.close()
  shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())  # without terminal codes
  assert "2000/4000" in shown and "━" in shown and "loss 0.6931" in shown
  assert "ETA 0:04:27" in shown and "step 2000: val accuracy 0.5000" in shown
  quiet = io.StringIO()
  with progress.quiet():
    steps = progress.Steps(4000, tty=True, stream=quiet)
  steps.show(1, metrics, 1.0)
  steps.message("nothing")
  assert quiet.getvalue() == ""
