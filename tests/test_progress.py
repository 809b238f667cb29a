"""The live line's ETA: at every log point, and a first estimate early when log points are far
apart (a CPU run's first log point can be minutes in)."""
from lra import progress, run


class Clock:
  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now


def test_the_eta_counts_hours_past_a_day():
  assert progress.eta_text(59.4) == "0:00:59"
  assert progress.eta_text(75_000 / 0.1) == "208:20:00"  # a paper row on a CPU


def test_a_first_estimate_comes_early_and_once(capsys):
  clock = Clock()
  bar = progress.Progress(total=4000, _tty=False, clock=clock)
  assert not bar.estimate_due()  # training has not started: compiling is not timed
  bar.start()
  clock.now += progress.EARLY_ETA_S - 0.5
  assert not bar.estimate_due()
  clock.now += 1.0
  assert bar.estimate_due()
  bar.estimate(75, 7.5)  # 3,925 steps left at 7.5 steps/s: 523 s
  assert capsys.readouterr().err == "step 75/4000  7.50 steps/s  ETA 0:08:43 (first estimate)\n"
  assert not bar.estimate_due()  # once: the log points take over
  quiet = progress.Progress(total=4000, enabled=False, _tty=False, clock=clock)
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
