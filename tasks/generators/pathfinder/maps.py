"""Occupancy maps of many images (or target attempts) at once, and the snakes generator's
extension step (`snakes.extend_snake`) and seed placement on them.

A map is a flat padded square of 8-bit levels (the original's float k / 255), one per row of a
2-D array; a patch is a list of flat offsets (see `Stencils`), so one paddle per row is read or
written with a single gather or scatter. A test replays every step against a direct
transcription of the original rules on full float maps.
"""
from __future__ import annotations

import numpy as np

from lra.tasks.generators.pathfinder.params import MAX_PADDLE_RETRIAL, Params
from lra.tasks.generators.pathfinder.strokes import NUM_SEED_DEGREES, Stencils

TAIL_DRAWS = 32  # uniform distractor tails tested at once before listing every free cell
TRIALS = MAX_PADDLE_RETRIAL + 1


def seed_gap(p: Params, k: Stencils, y, x, theta):
  """Gap centre behind a seed paddle with tail (y, x), and whether it and the head are inside.

  As the original: head = tail + length along theta, gap = head - (length + margin), each
  rounded up (`translate_coord`).
  """
  n, length = p.resolution, float(p.paddle_length)
  hy = np.ceil(y + length * np.sin(theta))
  hx = np.ceil(x + length * np.cos(theta))
  back = np.where(theta + np.pi < np.pi, theta + np.pi, theta - np.pi)
  gy = np.ceil(hy + float(length + k.margin) * np.sin(back))
  gx = np.ceil(hx + float(length + k.margin) * np.cos(back))
  inside = ((hy >= 0) & (hy < n) & (hx >= 0) & (hx < n) & (gy >= 0) & (gy < n)
            & (gx >= 0) & (gx < n))
  return np.stack([gy, gx], -1).astype(np.int64), inside


def kernel_hits(busy: np.ndarray, kernel: np.ndarray, k: Stencils, n: int) -> np.ndarray:
  """[n, n]: does the seed kernel (flat offsets) placed at each image cell meet a busy cell of
  the padded square `busy` [W, W]?"""
  blocked = np.zeros((n, n), dtype=bool)
  for offset in np.unique(kernel).tolist():
    dy = int(round(offset / k.width))
    dx = offset - dy * k.width
    blocked |= busy[k.pad + dy:k.pad + dy + n, k.pad + dx:k.pad + dx + n]
  return blocked


class Maps:
  """Occupancy maps (8-bit levels, flat padded squares) of many rows: attempts or images.

  `occ` holds the levels above 0.3 (lower ones can neither collide nor block a seed); `dil` the
  full map dilated by the margin disk, kept up to date; `busy` the count of image cells above
  0.3 (kept when `count_busy`). Each row's flat cell 0, a corner of the padding no stencil
  reads, absorbs clipped writes.
  """

  def __init__(self, p: Params, k: Stencils, rows: int, rng: np.random.Generator,
               count_busy: bool = True):
    self.p, self.k, self.rng, self.count_busy = p, k, rng, count_busy
    self.area = k.width * k.width
    self.occ = np.tile(k.frame, (rows, 1))
    self.dil = np.tile(k.frame_dil, (rows, 1))
    self.busy = np.full(rows, np.count_nonzero(k.busy[k.frame] & k.inside))

  def cells(self, rows: np.ndarray, table: np.ndarray, ids, starts: np.ndarray) -> np.ndarray:
    """Flat indices into the stacked maps of the cells `table[ids]` (offsets) around `starts`,
    one row of cells per map row ([A, M]; built in place: this is the hot loop)."""
    cells = table.take(ids, axis=0)
    cells += (rows * self.area + starts)[:, None]
    return cells

  def map(self, rows: np.ndarray, ids: np.ndarray, starts: np.ndarray) -> None:
    """occupancy = max(occupancy, patch `ids` at flat `starts`), one paddle per row, clipped."""
    k = self.k
    cells = k.occ_off.take(ids, axis=0)
    cells += starts[:, None]
    y, x = np.divmod(starts, k.width)
    near = np.flatnonzero((np.minimum(y, x) < k.pad + k.reach)
                          | (np.maximum(y, x) >= k.width - k.pad - k.reach))
    if len(near):  # redirect cells outside the image to cell 0
      cells[near] = np.where(k.inside[cells[near]], cells[near], 0)
    cells += (rows * self.area)[:, None]
    occ = self.occ.reshape(-1)
    old = occ[cells]
    if self.count_busy:  # every stored level is busy: count the cells that were 0
      self.busy[rows] += ((old == 0) * k.occ_count.take(ids, axis=0)).sum(axis=1)
    occ[cells] = np.maximum(old, k.occ_val.take(ids, axis=0))
    # Unclipped: an outside cell only reaches image cells that the frame already saturates.
    cells = self.cells(rows, k.dil_off, ids, starts)
    dil = self.dil.reshape(-1)
    dil[cells] = np.maximum(dil[cells], k.dil_val.take(ids, axis=0))

  def reset(self, rows: np.ndarray) -> None:
    """Back to the empty frame (whole rows: a copy beats scattering the paddles back)."""
    self.occ[rows], self.dil[rows] = self.k.frame, self.k.frame_dil
    self.busy[rows] = np.count_nonzero(self.k.busy[self.k.frame] & self.k.inside)

  def extend(self, rows, gap, angle, last_id, last_start):
    """`snakes.extend_snake` for one snake per row.

    Args:
      rows: [A] rows of the maps.
      gap: [A, 2] gap centre behind the snake's last paddle (the original's pivot).
      angle: [A] direction of the last paddle.
      last_id, last_start: [A] the last paddle (patch id, flat start), not yet in the map.
    Returns:
      ok [A], and for the new paddle: gap centre [A, 2], direction [A], patch id [A], flat
      start [A] (rows with ok False hold junk). Where ok, the last paddle has been mapped.
    """
    p, k = self.p, self.k
    dist = float(p.paddle_length + 2 * k.margin)
    gy = np.ceil(gap[:, 0] + dist * np.sin(angle)).astype(np.int64)
    gx = np.ceil(gap[:, 1] + dist * np.cos(angle)).astype(np.int64)
    centre = k.flat(gy, gx)
    cand = k.cand.take(last_id, axis=0)
    heads = cand + (centre * len(k.step))[:, None]
    heads = k.heads.reshape(-1).take(heads)
    pmf = k.free[self.dil.reshape(-1)[heads + (rows * self.area)[:, None]]]
    pmf *= k.cand_weight.take(last_id, axis=0)
    total = pmf.sum(axis=1)
    ok = total >= 1e-4
    cmf = np.cumsum(pmf / np.where(ok, total, 1.0)[:, None], axis=1)
    draws = self.rng.random((len(rows), TRIALS))
    chosen = np.zeros(len(rows), dtype=np.int64)
    start = np.zeros(len(rows), dtype=np.int64)
    pending = np.flatnonzero(ok)
    for t in range(TRIALS):  # a colliding draw is drawn again
      pick = (cmf[pending] <= draws[pending, t:t + 1]).sum(axis=1)
      past = pick >= cand.shape[1]
      pick[past] = 0
      j, head = cand[pending, pick], heads[pending, pick]
      # A draw past the last rounded cmf value takes the first candidate, as argmax did.
      j[past] = k.first_head[centre[pending[past]]]
      head[past] = k.heads[centre[pending[past]], j[past]]
      ids = NUM_SEED_DEGREES + j
      level = self.occ.reshape(-1)[self.cells(rows[pending], k.crit_off, ids, head)]
      hit = (level >= k.crit_min.take(ids, axis=0)).any(axis=1)
      chosen[pending[~hit]], start[pending[~hit]] = j[~hit], head[~hit]
      pending = pending[hit]
    ok[pending] = False
    self.map(rows[ok], last_id[ok], last_start[ok])
    return (ok, np.stack([gy, gx], 1), k.step_angle[chosen], NUM_SEED_DEGREES + chosen, start)

  def free_tails(self, rows, degrees):
    """Tails uniform among the cells whose seed kernel sees nothing above 0.3, per row.

    The first free cell among uniform draws is uniform over the free cells; a row without one
    lists them all. Returns y [A], x [A], found [A].
    """
    p, k, rng = self.p, self.k, self.rng
    n, kernel = p.resolution, k.seed_kernel[degrees + NUM_SEED_DEGREES // 2]
    y, x = rng.integers(0, n, size=(2, len(rows), TAIL_DRAWS))
    cells = k.flat(y, x)[:, :, None] + kernel[:, None, :] + (rows * self.area)[:, None, None]
    busy = k.busy[self.occ.reshape(-1)[cells]].any(axis=2)
    found = ~busy.all(axis=1)
    first = (np.arange(len(rows)), np.argmin(busy, axis=1))
    y, x = y[first], x[first]
    for i in np.flatnonzero(~found):
      square = k.busy[self.occ[rows[i]]].reshape(k.width, k.width)
      free = np.flatnonzero(~kernel_hits(square, kernel[i], k, n))
      if len(free):
        y[i], x[i] = divmod(int(free[rng.integers(len(free))]), n)
        found[i] = True
    return y, x, found
