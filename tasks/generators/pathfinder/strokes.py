"""Paddle stencils, drawn once per (parameters, margin) the way the snakes generator drew them.

A paddle is a line of paddle_length px and width 2 * thickness drawn with Pillow at twice the
resolution and Lanczos-downsampled into a (2R+1)^2 patch (R = length + ceil(thickness) + margin)
around its start point; its occupancy patch is the same line dilated by a disk of radius
2 * margin before the downsampling. The original redrew both for every paddle (SciPy's old
`imresize`, i.e. Pillow's Lanczos filter on 8-bit images); they depend only on the direction, of
which there are few, so they are drawn here once. Pillow's current LANCZOS stands in for the
2019 Pillow behind `imresize` (the stencils equal those the original code draws with Pillow 10).

Occupancy values are kept as the 8-bit levels k of those patches (the original's float k/255),
so every test is a lookup in a 256-entry table computed with the original's float arithmetic.
Images are flat arrays of a square padded by `pad` zero cells, so no stencil leaves them; a
patch is a list of flat offsets from its start cell, padded with `valid` False.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
from PIL import Image, ImageDraw

from lra.tasks.generators.pathfinder.params import AA_SCALE, Params

NUM_SEED_DEGREES = 360  # seed directions: whole degrees in [-180, 180), patch ids 0..359
BLOCKED = 1  # a padding cell that reads as fully occupied in the dilated map
_LANCZOS = Image.Resampling.LANCZOS


def level(k: np.ndarray) -> np.ndarray:
  """The original's value of occupancy level k: float32(k / 255), used in float64."""
  return (np.asarray(k, dtype=np.float64) / 255).astype(np.float32).astype(np.float64)


def disk_offsets(radius: float) -> tuple[np.ndarray, np.ndarray]:
  """(dy, dx) with dy^2 + dx^2 <= radius^2: the original's dilation disks."""
  r = int(math.floor(radius))
  dy, dx = np.mgrid[-r:r + 1, -r:r + 1]
  inside = dy * dy + dx * dx <= radius * radius
  return dy[inside], dx[inside]


def _dilate(image: np.ndarray, radius: float) -> np.ndarray:
  """Max over the disk; cells outside the image do not count (OpenCV's default border)."""
  r = int(math.floor(radius))
  padded = np.pad(image, r)
  out = np.zeros_like(image)
  h, w = image.shape
  for dy, dx in zip(*disk_offsets(radius)):
    np.maximum(out, padded[r + dy:r + dy + h, r + dx:r + dx + w], out=out)
  return out


def _downsample(image: np.ndarray, side: int) -> np.ndarray:
  """uint8 [side, side] by Lanczos (what `scipy.misc.imresize(..., interp='lanczos')` did)."""
  return np.asarray(Image.fromarray(image).resize((side, side), resample=_LANCZOS))


def draw_paddle(p: Params, margin: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
  """Line and occupancy patches, uint8 [2R+1, 2R+1], of a paddle starting at the centre.

  As `snakes.draw_line_n_mask`: the 2x line runs from the centre to the centre moved
  length * 2 along theta (rounded up), and is 2 * thickness wide.
  """
  s = AA_SCALE
  reach = p.paddle_length + int(math.ceil(p.paddle_thickness)) + margin
  big, centre = 2 * reach * s + 1, reach * s
  dist = float(p.paddle_length * s)
  head_y = int(math.ceil(centre + dist * math.sin(theta)))
  head_x = int(math.ceil(centre + dist * math.cos(theta)))
  canvas = Image.new("F", (big, big), "black")
  ImageDraw.Draw(canvas).line([(centre, centre), (head_x, head_y)], fill="white",
                              width=int(round(p.paddle_thickness * s)))
  line = np.asarray(canvas).astype(np.uint8)  # 0 or 255
  return (_downsample(line, 2 * reach + 1),
          _downsample(_dilate(line, margin * s), 2 * reach + 1))


def candidate_steps(radius: int) -> np.ndarray:
  """[J, 2] (dy, dx) from a gap centre to the candidate heads of the next paddle.

  As `snakes.get_coords_cmf`: angles one pixel of arc apart on a circle of `radius`, truncated
  to whole pixels, distinct, in `np.unique` order.
  """
  degrees_per_pixel = 360.0 / (2 * radius * np.pi)
  angles = np.arange(0, 360, degrees_per_pixel) * np.pi / 180
  steps = np.stack([np.floor(radius * np.sin(angles)), np.floor(radius * np.cos(angles))], 1)
  return np.unique(steps.astype(np.int64), axis=0)


def continuity_weight(angles: np.ndarray, last: np.ndarray, continuity: float) -> np.ndarray:
  """[len(last), J]: max(cos(min(continuity * |turn|, pi/2)), 0)^2, turn wrapped to [0, pi]."""
  diff = np.abs(angles[None, :] - last[:, None])
  turn = np.minimum(diff, 2 * np.pi - diff)
  return np.maximum(np.cos(np.minimum(turn * continuity, 0.5 * np.pi)), 0) ** 2


def _cell_lists(patches: np.ndarray, keep: np.ndarray, width: int):
  """The kept cells of each patch as lists: flat offsets from the centre [I, M], values [I, M]
  and counts [I, M] (1, or 0 on the padding, which repeats the first entry so that a scatter of
  maxima stays right)."""
  side = patches.shape[1]
  half = side // 2
  yy, xx = np.mgrid[-half:half + 1, -half:half + 1]
  offsets = (yy * width + xx).reshape(-1)
  flat_patches = patches.reshape(len(patches), -1)
  flat_keep = keep.reshape(len(keep), -1)
  size = max(1, int(flat_keep.sum(1).max()))
  off = np.zeros((len(patches), size), dtype=np.int64)
  val = np.zeros((len(patches), size), dtype=patches.dtype)
  counts = np.zeros((len(patches), size), dtype=np.int64)
  for i, (patch, kept) in enumerate(zip(flat_patches, flat_keep)):
    n = int(kept.sum())
    if n:
      off[i], val[i] = offsets[kept][0], patch[kept][0]
      off[i, :n], val[i, :n], counts[i, :n] = offsets[kept], patch[kept], 1
  return off, val, counts


@dataclasses.dataclass(frozen=True)
class Stencils:
  """Everything about one (Params, margin) that does not depend on the image.

  Shape letters: I = 360 + J patch ids (seed degree d has id d + 180, extension direction j has
  id 360 + j), J candidate directions of an extension, P = 2R+1 patch side, W padded side.

  Attributes:
    margin: the paddle margin (the gap between paddles is 2 margin).
    reach: R, from a patch's centre (its paddle's start) to its edge.
    pad: zero cells around the image, so no stencil read or write leaves the array.
    width: W = resolution + 2 pad.
    occupancy: [I, P, P] uint8 occupancy patches (what blocks later paddles).
    occ_off, occ_val, occ_count: occupancy cells above 0.3 as lists (see `_cell_lists`); lower
      levels matter only through the dilated map (they can neither collide nor block a seed).
    dil_off, dil_val: the nonzero cells of the occupancy patch dilated by the margin disk.
    crit_off, crit_min: occupancy cells high enough to collide, and the lowest map level each
      collides with.
    line_off, line_val: the nonzero cells of the line patches (what is drawn).
    seed_kernel: [360, K] flat offsets of the cells that must all be at most 0.3 for a seed
      tail (padded by repeating the first): where the occupancy patch is exactly 1, shifted by
      (+1, +1) because the original put the tail at index L+m+1 of its (2(L+m)+1)^2 window
      and OpenCV anchors the dilation at the centre, L+m.
    seed_usable: [360] bool. OpenCV's dilation fills cells outside the image with -inf, so
      unless every pixel has a kernel cell inside the image the dilated map has a negative
      value and the original's `find_available_coordinates` reports no free cell at all: a
      seed in such a direction fails (330 of 360 degrees at 32 px). This is why the original
      places few distractors, and why its first target seed points up and left at 32 px.
    step: [J, 2] `candidate_steps(length + margin)`.
    step_angle: [J] arctan2 of each step: the direction of the paddle drawn to that head
      (which is drawn from the head back towards the gap, i.e. at step_angle + pi).
    cand, cand_weight: [I, K] the candidates j whose continuity weight after a paddle with a
      given id is above 1e-12, and their weights (padded with weight 0). The others are only
      the original's cos(pi/2)^2 = 4e-33 for turns beyond pi / (2 continuity): they cannot be
      drawn, nor lift a total above 1e-4.
    free: [256] 1 - level(k): the weight of a candidate head whose dilated occupancy is k.
    busy: [256] level(k) > 0.3 (the original's `ceil(x - 0.3) != 0`).
    inside: [W * W] bool, the image cells of the padded square.
    frame: [W * W] uint8 occupancy of an empty image: 255 on the padding frame.
    frame_dil: [W * W] uint8, the frame dilated by the margin disk (inside the image), and
      255 at flat cell 1 (`BLOCKED`), where out-of-image candidates point.
    heads: [W * W, J] flat cell of each candidate head around a gap centre at a given flat cell
      (`BLOCKED` where the head is outside the image, so its weight is 0).
    first_head: [W * W] the first candidate inside the image (the original's index 0).
  """
  margin: int
  reach: int
  pad: int
  width: int
  occupancy: np.ndarray
  occ_off: np.ndarray
  occ_val: np.ndarray
  occ_count: np.ndarray
  dil_off: np.ndarray
  dil_val: np.ndarray
  crit_off: np.ndarray
  crit_min: np.ndarray
  line_off: np.ndarray
  line_val: np.ndarray
  seed_kernel: np.ndarray
  seed_usable: np.ndarray
  step: np.ndarray
  step_angle: np.ndarray
  cand: np.ndarray
  cand_weight: np.ndarray
  free: np.ndarray
  busy: np.ndarray
  inside: np.ndarray
  frame: np.ndarray
  frame_dil: np.ndarray
  heads: np.ndarray
  first_head: np.ndarray

  def flat(self, y, x):
    """Flat index of image pixel (y, x) in the padded square."""
    return (np.asarray(y) + self.pad) * self.width + np.asarray(x) + self.pad


def seed_angle(degree):
  """The original's seed direction: a whole degree in radians (`d * np.pi / 180`)."""
  return np.asarray(degree) * np.pi / 180


def _seed_kernels(occupancy: np.ndarray, p: Params, margin: int, reach: int, width: int):
  half = p.paddle_length + margin  # the original's struct window is (2 half + 1)^2
  n = p.resolution
  kernels, usable = [], []
  for patch in occupancy[:NUM_SEED_DEGREES]:
    a, b = np.nonzero(patch == 255)
    dy, dx = a - reach + 1, b - reach + 1
    keep = (np.abs(dy) <= half) & (np.abs(dx) <= half)
    dy, dx = dy[keep], dx[keep]
    if not len(dy):
      raise AssertionError(f"empty seed kernel for {p} margin {margin}")
    reached = np.zeros((n, n), dtype=bool)
    for a, b in zip(dy.tolist(), dx.tolist()):
      reached[max(-a, 0):n - max(a, 0), max(-b, 0):n - max(b, 0)] = True
    usable.append(bool(reached.all()))
    kernels.append(dy * width + dx)
  size = max(len(k) for k in kernels)
  return (np.stack([np.concatenate([k, np.full(size - len(k), k[0])]) for k in kernels]),
          np.array(usable))


@functools.cache
def stencils(p: Params, margin: int) -> Stencils:
  """The stencils of one (Params, margin), built once per process (~0.1 s at 32 px)."""
  n = p.resolution
  reach = p.paddle_length + int(math.ceil(p.paddle_thickness)) + margin
  pad = reach + margin + 2
  width = n + 2 * pad
  step = candidate_steps(p.paddle_length + margin)
  step_angle = np.arctan2(step[:, 0], step[:, 1])
  flipped = np.where(step_angle < 0, step_angle + np.pi, step_angle - np.pi)
  seed_theta = seed_angle(np.arange(-NUM_SEED_DEGREES // 2, NUM_SEED_DEGREES // 2))
  drawn = [draw_paddle(p, margin, float(t)) for t in np.concatenate([seed_theta, flipped])]
  line = np.stack([x for x, _ in drawn])
  occupancy = np.stack([x for _, x in drawn])
  dilated = np.stack([_dilate(np.pad(o, margin), margin) for o in occupancy])

  table = np.arange(256)
  collide = (level(table)[:, None] + level(table)[None, :]) >= 1.8
  busy = level(table) > 0.3
  # Lowest map level a patch level collides with (256: none).
  collide_min = np.where(collide.any(0), np.argmax(collide, axis=0), 256)
  occ_off, occ_val, occ_count = _cell_lists(occupancy, busy[occupancy], width)
  dil_off, dil_val, _ = _cell_lists(dilated, dilated > 0, width)
  crit_off, crit_val, _ = _cell_lists(occupancy, collide_min[occupancy] < 256, width)
  line_off, line_val, _ = _cell_lists(line, line > 0, width)
  seed_kernel, seed_usable = _seed_kernels(occupancy, p, margin, reach, width)

  inside = np.zeros((width, width), dtype=bool)
  inside[pad:pad + n, pad:pad + n] = True
  frame = np.zeros((n, n), dtype=np.uint8)
  frame[:p.padding] = frame[n - p.padding:] = 255
  frame[:, :p.padding] = frame[:, n - p.padding:] = 255
  square = np.zeros((width, width), dtype=np.uint8)
  square[pad:pad + n, pad:pad + n] = frame
  square_dil = np.zeros_like(square)
  square_dil[pad:pad + n, pad:pad + n] = _dilate(frame, margin)
  square_dil.reshape(-1)[BLOCKED] = 255
  gy, gx = np.divmod(np.arange(width * width), width)
  hy, hx = gy[:, None] - pad + step[:, 0], gx[:, None] - pad + step[:, 1]
  inb = (hy >= 0) & (hy < n) & (hx >= 0) & (hx < n)
  last = np.concatenate([seed_theta, step_angle])
  weight = continuity_weight(step_angle, last, p.continuity)
  significant = weight > 1e-12
  size = int(significant.sum(1).max())
  cand = np.zeros((len(weight), size), dtype=np.int64)
  cand_weight = np.zeros((len(weight), size))
  for i, keep in enumerate(significant):
    j = np.flatnonzero(keep)
    cand[i], cand[i, :len(j)], cand_weight[i, :len(j)] = j[0], j, weight[i, j]
  return Stencils(
      margin=margin, reach=reach, pad=pad, width=width, occupancy=occupancy,
      occ_off=occ_off, occ_val=occ_val, occ_count=occ_count, dil_off=dil_off, dil_val=dil_val,
      crit_off=crit_off, crit_min=collide_min[crit_val].astype(np.int16), line_off=line_off,
      line_val=line_val, seed_kernel=seed_kernel,
      seed_usable=seed_usable, step=step, step_angle=step_angle,
      cand=cand, cand_weight=cand_weight, free=1 - level(table),
      busy=busy, inside=inside.reshape(-1),
      frame=square.reshape(-1), frame_dil=square_dil.reshape(-1),
      heads=np.where(inb, (hy + pad) * width + hx + pad, BLOCKED), first_head=np.argmax(inb, 1))


def marker_image(p: Params, y: int, x: int) -> np.ndarray:
  """uint8 [N, N]: a disk of marker_radius at (y, x) drawn at 2x and Lanczos-downsampled.

  As the original's `draw_circle`: the 2x disk is centred on 2x pixel (2y, 2x).
  """
  s, n = AA_SCALE, p.resolution
  yy = np.arange(-y * s, (n - y) * s)[:, None]
  xx = np.arange(-x * s, (n - x) * s)[None, :]
  disk = np.where(xx ** 2 + yy ** 2 <= (p.marker_radius * s) ** 2, 255, 0).astype(np.uint8)
  return _downsample(disk, n)
