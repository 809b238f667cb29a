"""Pixels of a batch of scenes as the snakes generator saved them: paddles and markers composited
by max, then each image min-max stretched to 0..255 (old `scipy.misc.imsave` did that on save)."""
from __future__ import annotations

import dataclasses
import functools
import io
import math

import numpy as np
from PIL import Image

from lra.tasks.generators.pathfinder.params import AA_SCALE, Params
from lra.tasks.generators.pathfinder.snakes import Scenes
from lra.tasks.generators.pathfinder.strokes import marker_image, stencils

_CHUNK = 128  # images composited at once (a float32 canvas each)


@dataclasses.dataclass(frozen=True)
class Rendered:
  """Saved images and what the stretch did to their strokes. B images.

  Attributes:
    images: uint8 [B, N, N], min-max stretched.
    target_peak: [B] brightest target pixel after the stretch.
    distractor_peak: [B] brightest pixel where distractors outshine the targets (0 if none).
  """
  images: np.ndarray
  target_peak: np.ndarray
  distractor_peak: np.ndarray


@functools.cache
def _marker_patch(p: Params) -> tuple[int, np.ndarray]:
  """(h, patch [2h+1, 2h+1]): a marker away from the image edges, where Lanczos down-sampling
  is the same for every position (the 2x disk moves by whole 2x-pixel pairs)."""
  h = int(math.ceil((p.marker_radius * AA_SCALE + 3 * AA_SCALE) / AA_SCALE)) + 2
  c = p.resolution // 2
  return h, marker_image(p, c, c)[c - h:c + h + 1, c - h:c + h + 1]


def markers_image(p: Params, markers: np.ndarray) -> np.ndarray:
  """uint8 [N, N]: max of the marker images of markers [M, 2] (`snakes2.draw_circle`)."""
  n = p.resolution
  h, patch = _marker_patch(p)
  out = np.zeros((n, n), dtype=np.uint8)
  for y, x in markers.tolist():
    # Near an edge the filter is cut and renormalised: draw the whole image there.
    if min(y, x) >= h + 2 * AA_SCALE and max(y, x) < n - h - 2 * AA_SCALE:
      region = out[y - h:y + h + 1, x - h:x + h + 1]
      np.maximum(region, patch, out=region)
    else:
      np.maximum(out, marker_image(p, y, x), out=out)
  return out


def _composite(p: Params, scenes: Scenes, rows: np.ndarray, margin: int):
  """Strokes of the images `rows` (all of one margin): float [A, N, N] all, and targets only."""
  k = stencils(p, margin)
  n, target_slots = p.resolution, 2 * p.contour_length
  contrast = (p.snake_contrast * p.paddle_contrast, p.snake_contrast)
  # The original multiplied k / 255 by the contrast in float64 and stored float32.
  values = [(k.line_val / 255 * c).astype(np.float32) for c in contrast]
  canvas = np.zeros((len(rows), k.width * k.width), dtype=np.float32)
  targets = None
  for slot in range(scenes.ids.shape[1]):
    if slot == target_slots:
      targets = canvas.copy()
    used = np.flatnonzero(scenes.num_paddles[rows] > slot)
    if not len(used):
      continue
    ids = scenes.ids[rows[used], slot]
    start = k.flat(*scenes.starts[rows[used], slot].T)
    cells = (used * k.width * k.width)[:, None] + start[:, None] + k.line_off[ids]
    flat = canvas.reshape(-1)
    flat[cells] = np.maximum(flat[cells], values[slot >= target_slots][ids])
  if targets is None:
    targets = canvas
  inner = (slice(None), slice(k.pad, k.pad + n), slice(k.pad, k.pad + n))
  square = (len(rows), k.width, k.width)
  return (canvas.reshape(square)[inner].astype(np.float64),
          targets.reshape(square)[inner].astype(np.float64))


def render(p: Params, scenes: Scenes) -> Rendered:
  b, n = len(scenes.labels), p.resolution
  images = np.zeros((b, n, n), dtype=np.uint8)
  target_peak, distractor_peak = np.zeros(b), np.zeros(b)
  for margin in p.margins:
    group = np.flatnonzero(scenes.margins == margin)
    for chunk in range(0, len(group), _CHUNK):
      rows = group[chunk:chunk + _CHUNK]
      strokes, targets = _composite(p, scenes, rows, margin)
      for i, row in enumerate(rows.tolist()):
        image = np.maximum(strokes[i], markers_image(p, scenes.markers[row]) / 255)
        low, high = image.min(), image.max()
        scale = 255.0 / ((high - low) or 1.0)
        images[row] = ((image - low) * scale).clip(0, 255) + 0.5
        target_peak[row] = targets[i].max() * scale
        outshine = strokes[i][strokes[i] > targets[i]]
        distractor_peak[row] = outshine.max() * scale if outshine.size else 0.0
  return Rendered(images=images, target_peak=target_peak, distractor_peak=distractor_peak)


def encode_png(image: np.ndarray) -> bytes:
  """An 8-bit grayscale PNG of a uint8 [H, W] image."""
  buffer = io.BytesIO()
  Image.fromarray(image).save(buffer, format="PNG")
  return buffer.getvalue()
