"""The references under results/spt/README.md's SPT tables (tools/spt_summary.py): what a hidden
value's neighbours predict of it, computed from counts, on data where the answer is known."""
import sys
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import spt_summary  # noqa: E402  pylint: disable=wrong-import-position


def _data(inputs: np.ndarray, pad_id):
  return types.SimpleNamespace(spec=types.SimpleNamespace(pad_id=pad_id),
                               split=lambda name: {"inputs": inputs})


def test_neighbours_predict_a_value_fixed_by_them():
  """Ids alternate 1, 2 before their padding: each is fixed by its neighbours, so the count model
  scores every real token right at a loss near 0 (smoothing 1e-3 of a count, float32)."""
  rows = np.zeros((50, 12), np.int64)
  rows[:, :8] = np.tile([1, 2], 4)
  floor = spt_summary._neighbour_floor(_data(rows, 0), classes=3)  # pylint: disable=protected-access
  assert floor["val_right_given_neighbours"] == 1.0
  assert floor["val_loss_given_neighbours"] < 1e-3


def test_neighbours_of_independent_pixels_predict_no_better_than_their_frequencies():
  """Pixels drawn independently, half background: their neighbours carry nothing, so the loss is
  the levels' entropy (ln 2 for two equally likely levels) within sampling noise."""
  rng = np.random.default_rng(0)
  pixels = np.where(rng.random((4000, 16)) < 0.5, 0, 255).astype(np.uint8)
  floor = spt_summary._neighbour_floor(_data(pixels, None), classes=2)  # pylint: disable=protected-access
  assert abs(floor["val_loss_given_neighbours"] - np.log(2)) < 0.01
  assert abs(floor["val_right_given_neighbours"] - 0.5) < 0.02


def test_pads_are_never_scored():
  """Four random ids then twelve pads: the pads would be right every time, so scoring them would
  lift the share right far above the real tokens' coin toss."""
  rng = np.random.default_rng(1)
  rows = np.zeros((4000, 16), np.int64)
  rows[:, :4] = rng.integers(1, 3, (4000, 4))
  floor = spt_summary._neighbour_floor(_data(rows, 0), classes=3)  # pylint: disable=protected-access
  assert abs(floor["val_right_given_neighbours"] - 0.5) < 0.03
