"""Pathfinder generator parameters: one table per resolution, one contour length per difficulty.

Values follow DATA.md in the shared folder beside the repository (the LRA "hard" settings of
Linsley et al.'s snakes generator).
"""
from __future__ import annotations

import dataclasses

# Difficulty -> (release folder, target contour length in paddles).
DIFFICULTIES: dict[str, tuple[str, int]] = {
    "easy": ("curv_baseline", 6),
    "intermediate": ("curv_contour_length_9", 9),
    "hard": ("curv_contour_length_14", 14),
}

# Per resolution. Lengths are in output pixels. `distractor_budget` is the number of distractor
# paddles: the count of distractor snakes is budget // distractor_length, which gives DATA.md's
# hard counts (5, 5, 8, 7 at length 4) and the release's more-but-shorter distractors when the
# targets are shorter. Contrast of a paddle = snake_contrast * paddle_contrast (capped at 1 after
# antialiasing); at 32 px the 2 x 0.75 keeps 0.5 px lines visible. Path-X margin: DATA.md lists
# "2 or 3"; we use 2. `frame` is the forbidden border, `aa_scale` the supersampling factor.
_COLUMNS = ("paddle_length", "paddle_thickness", "margin", "seed_distance", "marker_radius",
            "continuity", "distractor_budget", "snake_contrast", "paddle_contrast", "frame",
            "aa_scale")
_TABLE: dict[int, tuple] = {
    32: (2, 0.5, 1, 7, 1.5, 1.0, 20, 2.0, 0.75, 1, 2),
    64: (5, 1.0, 1, 12, 2.5, 1.8, 20, 1.0, 0.8, 1, 2),
    128: (5, 1.5, 2, 20, 3.0, 1.8, 32, 1.0, 0.9, 1, 2),
    256: (5, 2.0, 3, 27, 5.0, 1.8, 30, 1.0, 1.0, 22, 2),
}
RESOLUTIONS = tuple(sorted(_TABLE))

# Retry limits. Targets at a dead end rewind REWIND_DEPTH paddles (both snakes) and regrow, up to
# REWINDS_PER_PADDLE * contour_length times, before starting again from new seeds (at most
# TARGET_TRIES seed pairs). A distractor at a dead end is restarted, DISTRACTOR_TRIES times at most,
# then dropped (as in the original). A first paddle is searched among 8 random ones, then 56 more
# (SEED_CHUNKS); an extension tests up to LAZY_DRAWS weighted draws one by one before testing
# every candidate at once.
TARGET_TRIES = 200
REWIND_DEPTH = 3
REWINDS_PER_PADDLE = 3
DISTRACTOR_TRIES = 5
SEED_CHUNKS = (8, 56)
LAZY_DRAWS = 4


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
  margin: int
  seed_distance: int
  marker_radius: float
  continuity: float
  snake_contrast: float
  paddle_contrast: float
  frame: int
  aa_scale: int

  @property
  def folder(self) -> str:
    return DIFFICULTIES[self.difficulty][0]

  def metadata_fields(self) -> tuple:
    """The release's per-image constants, fields 5-11 of a metadata line (n_contrasts = 1)."""
    return (self.continuity, self.contour_length, self.distractor_length, self.paddle_length,
            self.paddle_thickness, self.margin, 1)


def get_params(resolution: int, difficulty: str) -> Params:
  """The parameter set for one resolution and difficulty, or a ValueError naming the valid ones."""
  if resolution not in _TABLE:
    raise ValueError(f"Resolution {resolution} is not supported; expected one of "
                     f"{', '.join(map(str, RESOLUTIONS))}.")
  if difficulty not in DIFFICULTIES:
    raise ValueError(f"Difficulty '{difficulty}' is not supported; expected one of "
                     f"{', '.join(DIFFICULTIES)}.")
  row = dict(zip(_COLUMNS, _TABLE[resolution]))
  contour_length = DIFFICULTIES[difficulty][1]
  distractor_length = contour_length // 3
  budget = row.pop("distractor_budget")
  return Params(resolution=resolution, difficulty=difficulty, contour_length=contour_length,
                distractor_length=distractor_length, num_distractors=budget // distractor_length,
                **row)
