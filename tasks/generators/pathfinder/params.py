"""Pathfinder generator parameters: one row per resolution, one contour length per difficulty.

The values are the ones LRA used with Linsley et al.'s "snakes" generator
(github.com/drewlinsley/pathfinder, `snakes2.py` + `snakes.py`, 2019 commit): the per-resolution
settings listed in the docstrings of LRA's Pathfinder TFDS builders
(github.com/google-research/long-range-arena, `lra_benchmarks/data/pathfinder.py`) on top of the
defaults of `snakes2_wrapper.py`'s `Args` (retry limits, padding 22, seed distance 27, paddle
length 5). That code ran under Python 2, so `contour_length / 3` and `budget / distractor_length`
are integer divisions.
"""
from __future__ import annotations

import dataclasses

from lra import errors

# Difficulty -> (release folder, target contour length in paddles), as in `snakes2_wrapper.py`.
DIFFICULTIES: dict[str, tuple[str, int]] = {
    "easy": ("curv_baseline", 6),
    "intermediate": ("curv_contour_length_9", 9),
    "hard": ("curv_contour_length_14", 14),
}

# Per resolution, in output pixels. `margins`: the generator draws one per image (Path-X: 2 or 3).
# `distractor_budget` // distractor_length is the number of distractor snakes tried (LRA's
# `num_distractor_snakes = budget / distractor_length`). A target paddle is drawn at
# snake_contrast * paddle_contrast, a distractor paddle at snake_contrast, a marker at 1.
# `padding` is the frame that no paddle may cover.
_COLUMNS = ("paddle_length", "paddle_thickness", "margins", "seed_distance", "marker_radius",
            "continuity", "distractor_budget", "snake_contrast", "paddle_contrast", "padding")
_TABLE: dict[int, tuple] = {
    32: (2, 0.5, (1,), 7, 1.5, 1.0, 20, 2.0, 0.75, 1),
    64: (5, 1.0, (1,), 12, 2.5, 1.8, 22, 0.8, 1.0, 1),
    128: (5, 1.5, (2, 3), 20, 3.0, 1.8, 35, 0.9, 1.0, 1),
    256: (5, 2.0, (3,), 27, 5.0, 1.8, 30, 1.0, 1.0, 22),
}
RESOLUTIONS = tuple(sorted(_TABLE))

# Shared by every resolution (LRA set antialias_scale = 2 last; `Args` defaults for the rest).
AA_SCALE = 2               # paddles and markers are drawn at twice the resolution
MAX_PADDLE_RETRIAL = 2     # a seed or a paddle gets 1 + 2 draws before its snake gives up
MAX_DISTRACTOR_RETRIAL = 4  # a distractor snake gets 1 + 4 attempts, then it is skipped
STOP_WITH_AVAILABILITY = 0.01  # no distractor seed once less than 1% of the pixels are free


@dataclasses.dataclass(frozen=True)
class Params:
  """Everything that shapes one image (see the table above for units)."""
  resolution: int
  difficulty: str
  contour_length: int
  distractor_length: int
  num_distractors: int
  paddle_length: int
  paddle_thickness: float
  margins: tuple[int, ...]
  seed_distance: int
  marker_radius: float
  continuity: float
  snake_contrast: float
  paddle_contrast: float
  padding: int

  @property
  def folder(self) -> str:
    return DIFFICULTIES[self.difficulty][0]

  def metadata_fields(self, margin: int) -> tuple:
    """Fields 5-11 of a metadata line: continuity, contour length, distractor length, paddle
    length, thickness, this image's margin, number of paddle contrasts (1)."""
    return (self.continuity, self.contour_length, self.distractor_length, self.paddle_length,
            self.paddle_thickness, margin, 1)


def get_params(resolution: int, difficulty: str) -> Params:
  """The parameter set for one resolution and difficulty, or a ValueError naming the valid ones."""
  if resolution not in _TABLE:
    raise errors.BadValue(f"Resolution {resolution} is not supported; expected one of "
                          f"{', '.join(map(str, RESOLUTIONS))}.")
  if difficulty not in DIFFICULTIES:
    raise errors.BadValue(f"Difficulty '{difficulty}' is not supported; expected one of "
                          f"{', '.join(DIFFICULTIES)}.")
  row = dict(zip(_COLUMNS, _TABLE[resolution]))
  contour_length = DIFFICULTIES[difficulty][1]
  distractor_length = contour_length // 3
  budget = row.pop("distractor_budget")
  return Params(resolution=resolution, difficulty=difficulty, contour_length=contour_length,
                distractor_length=distractor_length, num_distractors=budget // distractor_length,
                **row)
