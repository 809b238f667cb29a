"""The fitting screen (lra check --fit): it must tell a block that fits from one that cannot."""
import pytest

from lra.bench import fit_screen


def test_the_bar_reads_the_last_windows_of_train_accuracy():
  fit = fit_screen.Fit("m", "squares", (), train_accuracy=fit_screen.BAR, train_loss=0.5,
                       steps_per_s=1.0)
  assert fit.fits and fit.line().startswith("PASS")
  low = fit_screen.Fit("m", "squares", (), train_accuracy=fit_screen.BAR - 0.01, train_loss=0.69,
                       steps_per_s=1.0)
  assert not low.fits and low.line().startswith("FAIL")


@pytest.mark.slow  # two 600-step runs: minutes on one core
def test_latte_fits_and_s5_under_layer_norm_does_not(tmp_path):
  """Measured on this screen (results/fit_screen/fit.json): Latte ~77% train accuracy, S5 in the
  common block (LayerNorm) ~55%; the bar (65%) sits between with ~10 points either side."""
  latte = fit_screen.screen("latte", data_dir=tmp_path)
  s5 = fit_screen.screen("s5", data_dir=tmp_path)
  assert latte.fits, latte.line()
  assert not s5.fits, s5.line()
