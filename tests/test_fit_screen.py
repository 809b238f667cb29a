"""The fitting screen (lra check --fit): it must tell a block that fits from one that cannot."""
import pytest

from lra.bench import fit_screen


def _window(step, accuracy, loss=0.5):
  return {"step": step, "train/accuracy": accuracy, "train/loss": loss, "train/steps_per_s": 9.0}


def test_the_verdict_reads_the_last_windows_of_train_accuracy_against_the_bar():
  """Only the log windows of the last LAST_STEPS steps count (an early high window does not),
  the evaluation line is skipped, and the bar decides."""
  bar, windows = fit_screen.BAR, fit_screen.LAST_STEPS // fit_screen.LOG_EVERY
  early = [_window(50 * i, 0.99) for i in range(1, 5)]
  logs = early + [{"step": 600, "val/accuracy": 0.99}]
  fits = fit_screen.read_fit(logs + [_window(1000 + i, bar) for i in range(windows)],
                             "m", "squares", ())
  assert fits.fits and fits.line().startswith("PASS") and fits.train_accuracy == pytest.approx(bar)
  low = fit_screen.read_fit(logs + [_window(1000 + i, bar - 0.02) for i in range(windows)],
                            "m", "squares", ())
  assert not low.fits and low.line().startswith("FAIL")
  assert f"of {fit_screen.STEPS} steps on {fit_screen.TRAIN_IMAGES} Pathfinder" in low.line()


@pytest.mark.slow  # two 600-step runs: minutes on one core
def test_the_screen_passes_latte_and_fails_a_block_that_cannot_move(tmp_path):
  """Latte fits the screen (its accuracy: results/fit_screen/fit.json), and the same model
  at a learning rate of 0, which cannot fit anything, does not: the screen separates the two
  whatever S5 or another mixer measures today."""
  latte = fit_screen.screen("latte", data_dir=tmp_path)
  frozen = fit_screen.screen("latte", data_dir=tmp_path, overrides=("train.learning_rate=0",))
  assert latte.fits, latte.line()
  assert not frozen.fits, frozen.line()
