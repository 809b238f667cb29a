"""Snake geometry: dashed contours ("paddles") grown on an occupancy grid so snakes never touch.

All geometry lives on a supersampled grid (aa_scale cells per output pixel) padded by a blocked
border, with positions as flat indices into it, so a candidate paddle is tested with one gather of
precomputed stencil offsets. A paddle is (gap centre c, direction a): it runs from c + margin * u(a)
to c + (margin + paddle_length) * u(a); the next gap centre is c + (paddle_length + 2 margin) * u(a).
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import math

import numpy as np

from lra.tasks.generators.pathfinder.params import (DISTRACTOR_TRIES, LAZY_DRAWS, REWIND_DEPTH,
                                          REWINDS_PER_PADDLE, SEED_CHUNKS, TARGET_TRIES, Params)


@dataclasses.dataclass(frozen=True)
class Tables:
  """Precomputed stencils for one Params (built once per process).

  Attributes:
    scale: supersampling factor S; geometry is in grid cells (1/S output pixel).
    pad: blocked cells around the S*resolution interior.
    width: side of the padded square grid.
    unit: [A, 2] (dy, dx) unit vector of each of the A paddle directions.
    step: [A] flat offset from one gap centre to the next.
    shift: added to every stored offset so that all are >= 0: a paddle at centre c tests
      `grid[c - shift:][offsets]`, which saves an index addition per test.
    stencil: [A, K] shifted offsets of the cells a paddle claims (padded by repeats).
    cells: per angle, the same offsets without repeats (for counting claims).
    rel: [J] direction changes (in steps of 2 pi / A) with positive continuity weight.
    weight: [J] max(cos(min(continuity * |turn|, pi/2)), 0) ** 2.
    cumulative: the running sums of `weight`, as a list for bisect.
    rel_list: `rel` as a Python list.
    ext: [A, J, K] stencils of the J successors of a paddle with direction a.
    disk: shifted offsets of a marker-sized disk.
    empty: the flat claim-count grid (uint8) with only the border and the frame claimed.
  """
  scale: int
  pad: int
  width: int
  unit: np.ndarray
  step: np.ndarray
  shift: int
  stencil: np.ndarray
  cells: list
  rel: np.ndarray
  weight: np.ndarray
  cumulative: list
  rel_list: list
  ext: np.ndarray
  disk: np.ndarray
  empty: np.ndarray


def segment_distance(py, px, ay, ax, by, bx):
  """Distance from points p to segments a-b (broadcasting NumPy arrays)."""
  dy, dx = by - ay, bx - ax
  t = np.clip(((py - ay) * dy + (px - ax) * dx) / (dy * dy + dx * dx), 0.0, 1.0)
  return np.hypot(py - ay - t * dy, px - ax - t * dx)


def footprint_radius(p: Params) -> float:
  """Radius (grid cells) of the cells a paddle claims around its centre line.

  Half the thickness plus the margin, less half a cell (the original tolerated overlaps of
  partly covered pixels). Claims of two paddles never overlap unless they are consecutive in one
  snake, so their centre lines stay more than 2 * radius - sqrt(2) cells apart.
  """
  return (p.paddle_thickness / 2 + p.margin) * p.aa_scale - 0.5


@functools.lru_cache(maxsize=None)
def tables(p: Params) -> Tables:
  s = p.aa_scale
  length, margin = p.paddle_length * s, p.margin * s
  stride = length + 2 * margin
  num_angles = max(16, 4 * round(2 * math.pi * stride / 4))
  theta = 2 * math.pi * np.arange(num_angles) / num_angles
  unit = np.stack([np.sin(theta), np.cos(theta)], axis=1)
  radius = footprint_radius(p)
  reach = max(int(math.ceil(margin + length + radius)), int(math.ceil(p.marker_radius * s))) + 1
  # A gap centre lies within `reach` of free cells, its successor one stride further, and the
  # successor's stencil within `reach` of that: every index stays inside the padded grid.
  pad = 2 * reach + stride + 2
  width = p.resolution * s + 2 * pad

  shift = reach * width + reach
  yy, xx = np.mgrid[-reach:reach + 1, -reach:reach + 1]
  stencils = []
  for a in range(num_angles):
    (uy, ux) = unit[a]
    d = segment_distance(yy, xx, margin * uy, margin * ux, (margin + length) * uy,
                          (margin + length) * ux)
    stencils.append((yy[d <= radius] * width + xx[d <= radius]).astype(np.int64) + shift)
  k = max(len(x) for x in stencils)
  stencil = np.stack([np.concatenate([x, np.full(k - len(x), x[0])]) for x in stencils])

  rel = np.arange(-(num_angles // 2) + 1, num_angles // 2 + 1)
  turn = np.minimum(p.continuity * np.abs(rel) * 2 * math.pi / num_angles, math.pi / 2)
  weight = np.maximum(np.cos(turn), 0.0) ** 2
  keep = weight > 1e-9
  rel, weight = rel[keep], weight[keep]
  ext = stencil[(np.arange(num_angles)[:, None] + rel[None, :]) % num_angles]

  step_yx = np.rint(stride * unit).astype(np.int64)
  step = step_yx[:, 0] * width + step_yx[:, 1]

  r = p.marker_radius * s
  ri = int(math.ceil(r))
  dy, dx = np.mgrid[-ri:ri + 1, -ri:ri + 1]
  inside = dy * dy + dx * dx <= r * r
  disk = (dy[inside] * width + dx[inside]).astype(np.int64) + shift

  empty = np.ones((width, width), dtype=np.uint8)
  lo, hi = pad + p.frame * s, pad + (p.resolution - p.frame) * s
  empty[lo:hi, lo:hi] = 0
  return Tables(scale=s, pad=pad, width=width, unit=unit, step=step, shift=shift,
                stencil=stencil, cells=stencils, rel=rel, weight=weight,
                cumulative=list(itertools.accumulate(weight.tolist())), rel_list=rel.tolist(),
                ext=ext, disk=disk, empty=empty.ravel())


@dataclasses.dataclass
class Scene:
  """One image's geometry (grid coordinates, see `Tables`).

  Attributes:
    centre: [P] flat gap centre of each paddle.
    angle: [P] direction index of each paddle.
    snake: [P] 0 and 1 for the two targets, 2.. for distractors; a snake's paddles are in order.
    origin: [2, 2] (y, x) start of each target (start of its first paddle).
    terminal: [2, 2] (y, x) end of each target (end of its last paddle).
    markers: [2, 2] (y, x) centres of the two markers.
    label: 1 when both markers sit on the same target.
  """
  centre: np.ndarray
  angle: np.ndarray
  snake: np.ndarray
  origin: np.ndarray
  terminal: np.ndarray
  markers: np.ndarray
  label: int


def paddle_ends(p: Params, t: Tables, centre: np.ndarray, angle: np.ndarray):
  """Start and end points [P, 2] (grid y, x) of paddles given as (gap centre, direction)."""
  cy, cx = np.divmod(centre, t.width)
  c = np.stack([cy, cx], axis=1).astype(np.float64)
  u = t.unit[angle]
  return c + p.margin * t.scale * u, c + (p.margin + p.paddle_length) * t.scale * u


def to_pixels(p: Params, t: Tables, yx: np.ndarray) -> np.ndarray:
  """Grid (y, x) -> output-pixel coordinates (pixel (i, j) has its centre at (i, j))."""
  return (np.asarray(yx, dtype=np.float64) - t.pad - (t.scale - 1) / 2) / t.scale


class _Grower:
  """Grows the snakes of one image.

  `claims[s]` counts, per cell, the paddles (and disks) that forbid the cell to a new paddle of
  target slot s; counts rather than flags so that a dead end can be undone exactly. A snake's
  newest paddle is counted only against the other slot (its successor meets it at the joint) and
  against its own once the successor is placed. Distractors grow one at a time in slot 0.
  """

  def __init__(self, p: Params, t: Tables, rng: np.random.Generator):
    self.p, self.t, self.rng = p, t, rng
    self.claims = [t.empty.copy(), t.empty.copy()]
    self._uniforms: list[float] = []

  def uniform(self) -> float:
    if not self._uniforms:
      self._uniforms = self.rng.random(256).tolist()
    return self._uniforms.pop()

  def claim(self, slot: int, centre: int, offsets: np.ndarray, release: bool = False) -> None:
    """Counts (or with `release`, uncounts) the cells `offsets` around `centre` for a slot."""
    view = self.claims[slot][centre - self.t.shift:]
    if release:
      view[offsets] -= 1
    else:
      view[offsets] += 1

  def seed(self, slot: int, lo: int, hi: int, around: np.ndarray | None = None):
    """A free first paddle: (centre, angle, start point) or None.

    Its start lies uniformly in [lo, hi)^2 (grid cells), or seed_distance from `around`.
    """
    t, p = self.t, self.p
    grid = self.claims[slot]
    for n in SEED_CHUNKS:  # usually the small first chunk has a free one
      u = self.rng.random((n, 3))
      angle = (u[:, 0] * len(t.unit)).astype(np.int64)
      if around is None:
        start = lo + u[:, 1:] * (hi - lo)
      else:
        phi = 2 * math.pi * u[:, 1]
        start = around + p.seed_distance * t.scale * np.stack([np.sin(phi), np.cos(phi)], 1)
      # Outside starts land on the claimed border, so they are rejected below.
      c_yx = np.clip(np.rint(start - p.margin * t.scale * t.unit[angle]), t.pad,
                     t.width - t.pad - 1).astype(np.int64)
      centre = c_yx[:, 0] * t.width + c_yx[:, 1]
      busy = grid[(centre - t.shift)[:, None] + t.stencil[angle]].any(axis=1)
      i = int(np.argmin(busy))
      if not busy[i]:
        return int(centre[i]), int(angle[i]), c_yx[i] + p.margin * t.scale * t.unit[angle[i]]
    return None

  def extend(self, slot: int, centre: int, angle: int):
    """Direction of the paddle after (centre, angle), by continuity weight among free ones.

    Returns (next centre, direction), or None at a dead end. Claims nothing.
    """
    t = self.t
    nxt = centre + int(t.step[angle])
    view = self.claims[slot][nxt - t.shift:]
    cumulative, num_angles = t.cumulative, len(t.unit)
    # Draw by weight and test only the drawn candidate: exact sampling from the free ones, and
    # far cheaper than testing all of them while most are free.
    known_busy = set()
    for _ in range(LAZY_DRAWS):
      j = bisect.bisect_right(cumulative, self.uniform() * cumulative[-1])
      if j in known_busy:
        continue
      if not np.count_nonzero(view[t.stencil[(angle + t.rel_list[j]) % num_angles]]):
        return nxt, (angle + t.rel_list[j]) % num_angles
      known_busy.add(j)
    busy = view[t.ext[angle]].any(axis=1)
    if busy.all():
      return None
    free_cum = list(itertools.accumulate(np.where(busy, 0.0, t.weight).tolist()))
    j = min(bisect.bisect_right(free_cum, self.uniform() * free_cum[-1]), len(busy) - 1)
    while busy[j]:  # only reachable through rounding at the top end
      j -= 1
    return nxt, (angle + t.rel_list[j]) % num_angles

  def end_point(self, centre: int, angle: int) -> np.ndarray:
    cy, cx = divmod(centre, self.t.width)
    reach = (self.p.margin + self.p.paddle_length) * self.t.scale
    return np.array([cy, cx], float) + reach * self.t.unit[angle]

  def disk_centre(self, yx: np.ndarray) -> int:
    cy, cx = np.rint(yx).astype(np.int64)
    return int(cy * self.t.width + cx)

  def targets(self):
    """Two target snakes grown in turn from seeds seed_distance apart, or None if stuck."""
    p, t = self.p, self.t
    lo = t.pad + 2 * p.seed_distance * t.scale
    hi = t.pad + (p.resolution - 2 * p.seed_distance) * t.scale
    if hi <= lo:  # small images: any interior start
      lo, hi = t.pad + p.frame * t.scale, t.pad + (p.resolution - p.frame) * t.scale
    first = self.seed(0, lo, hi)
    if first is None:
      return None
    self.claim(1, first[0], t.cells[first[1]])
    self.claim(1, self.disk_centre(first[2]), t.disk)
    second = self.seed(1, lo, hi, around=first[2])
    if second is None:
      return None
    self.claim(0, second[0], t.cells[second[1]])
    self.claim(0, self.disk_centre(second[2]), t.disk)
    chains = [[first[:2]], [second[:2]]]
    # Growth alternates between the targets (the shorter one grows next). A dead end rewinds that
    # target a few paddles (further after repeated dead ends) and regrows it: much cheaper than
    # new seeds. Paddle k > 0 of a chain claimed the cells of paddle k - 1 for its own slot and
    # its own cells for the other slot; a rewind releases exactly those.
    rewinds = [0, 0]
    while min(len(chains[0]), len(chains[1])) < p.contour_length:
      slot = 0 if len(chains[0]) <= len(chains[1]) else 1
      chain = chains[slot]
      nxt = self.extend(slot, *chain[-1])
      if nxt is None:
        rewinds[slot] += 1
        if sum(rewinds) > REWINDS_PER_PADDLE * p.contour_length:
          return None
        keep = max(1, len(chain) - REWIND_DEPTH * (1 + rewinds[slot] // p.contour_length))
        for k in range(len(chain) - 1, keep - 1, -1):
          self.claim(slot, chain[k - 1][0], t.cells[chain[k - 1][1]], release=True)
          self.claim(1 - slot, chain[k][0], t.cells[chain[k][1]], release=True)
        del chain[keep:]
      else:
        self.claim(slot, chain[-1][0], t.cells[chain[-1][1]])
        self.claim(1 - slot, nxt[0], t.cells[nxt[1]])
        chain.append(nxt)
    # From here on one grid blocks everything: both targets and disks around all four ends (the
    # unmarked ends too, so that the clearance gives nothing away).
    for slot in (0, 1):
      self.claim(slot, chains[slot][-1][0], t.cells[chains[slot][-1][1]])
    grid = self.claims[0]
    np.add(grid, self.claims[1], out=grid)
    origin = np.stack([first[2], second[2]])
    terminal = np.stack([self.end_point(*chain[-1]) for chain in chains])
    for yx in (*origin, *terminal):
      self.claim(0, self.disk_centre(yx), t.disk)
    return chains, origin, terminal

  def distractor(self):
    """One distractor of distractor_length paddles, or None (its claims are withdrawn)."""
    t = self.t
    first = self.seed(0, t.pad, t.width - t.pad)
    if first is None:
      return None
    chain = [first[:2]]
    while len(chain) < self.p.distractor_length:
      nxt = self.extend(0, *chain[-1])
      if nxt is None:
        for centre, angle in chain[:-1]:
          self.claim(0, centre, t.cells[angle], release=True)
        return None
      self.claim(0, chain[-1][0], t.cells[chain[-1][1]])
      chain.append(nxt)
    self.claim(0, chain[-1][0], t.cells[chain[-1][1]])
    return chain


def make_scene(p: Params, rng: np.random.Generator, label: int) -> Scene:
  """Samples the geometry of one image with the given label (1 = markers on the same target)."""
  t = tables(p)
  for _ in range(TARGET_TRIES):
    grower = _Grower(p, t, rng)
    found = grower.targets()
    if found is not None:
      break
  else:
    raise RuntimeError(f"Could not fit two target snakes after {TARGET_TRIES} tries with {p}; "
                       "the contour is too long for this resolution.")
  chains, origin, terminal = found
  for _ in range(p.num_distractors):
    for _ in range(DISTRACTOR_TRIES):
      chain = grower.distractor()
      if chain is not None:
        chains.append(chain)
        break
  first = int(rng.integers(0, 2))
  other = first if label == 1 else 1 - first
  snake = np.concatenate([np.full(len(c), i) for i, c in enumerate(chains)])
  flat = [pa for c in chains for pa in c]
  return Scene(centre=np.array([c for c, _ in flat], dtype=np.int64),
               angle=np.array([a for _, a in flat], dtype=np.int64), snake=snake,
               origin=origin, terminal=terminal,
               markers=np.stack([origin[first], terminal[other]]), label=int(label))
