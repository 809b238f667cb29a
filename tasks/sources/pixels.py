"""What Image and Pathfinder share: pixel tokens (0-255, no padding) and their picture as text."""
from __future__ import annotations

import math

import numpy as np

VOCAB_SIZE = 256
DTYPE = np.uint8
_RAMP = " .:-=+*#%@"  # dark to bright
_MAX_WIDTH = 64


def decode(tokens: np.ndarray) -> str:
  """A square image tokens[T] (T = side^2, row-major) drawn with one character per pixel.

  Sides above 64 are max-pooled down to at most 64 so Path-X fits a terminal; max keeps the thin
  Pathfinder strokes visible.
  """
  tokens = np.asarray(tokens).astype(np.int64)
  side = math.isqrt(tokens.size)
  if side * side != tokens.size:
    raise ValueError(f"Expected a square image, got {tokens.size} tokens.")
  image = tokens.reshape(side, side)
  factor = -(-side // _MAX_WIDTH)
  if factor > 1:
    padded = np.zeros((-(-side // factor) * factor,) * 2, dtype=np.int64)
    padded[:side, :side] = image
    image = padded.reshape(len(padded) // factor, factor, -1, factor).max(axis=(1, 3))
  levels = np.clip(image, 0, 255) * len(_RAMP) // 256
  lines = ["".join(_RAMP[v] for v in row) for row in levels]
  note = f"[{side}x{side} pixels" + (f", max-pooled {factor}x{factor}]" if factor > 1 else "]")
  return note + "\n" + "\n".join(lines)
