"""Snake growth as in the snakes generator (`snakes2.two_snakes`, `snakes.make_many_snakes`),
for many images at once.

Each image keeps an occupancy map (the downsampled, dilated paddles; 1 on the padding frame).
Targets: a first seed tail, uniform among the cells whose seed kernel sees no occupancy above 0.3
inside a square 2 * seed_distance from every edge (many directions fail outright, see
`Stencils.seed_usable`; the attempt is then over); a second seed tail seed_distance away in a
random direction, unchecked; then both snakes grow in turn, one paddle each. A paddle's head is
drawn among the whole-pixel points length + margin from the gap centre, with weight
(1 - occupancy dilated by the margin disk) * continuity weight, up to 3 times, until its
occupancy patch plus the map stays below 1.8 everywhere. A snake's paddle enters the map when its
successor is placed (the first target's last paddle never does). Any failure starts both targets
again. Distractors: up to num_distractors snakes of distractor_length paddles, each given 5
attempts, seeded uniformly among the free cells (no seed once < 1% of the image is free); a
failed attempt leaves no trace. Seeds and heads never leave the image.

Attempts are independent, so many are grown side by side as rows of arrays: target attempts in
a pool whose successes go to the images in order, distractors for all images in lockstep. The
output depends only on the random generator passed in.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from lra.tasks.generators.pathfinder.maps import TRIALS, Maps, kernel_hits, seed_gap
from lra.tasks.generators.pathfinder.params import (MAX_DISTRACTOR_RETRIAL,
                                                    STOP_WITH_AVAILABILITY, Params)
from lra.tasks.generators.pathfinder.strokes import (NUM_SEED_DEGREES, Stencils, seed_angle,
                                                     stencils)

TARGET_POOL = 1024  # target attempts grown side by side (fewer for small batches)
SEED_BATCH = 2048   # candidate target seedings drawn at once


@dataclasses.dataclass
class Scenes:
  """The geometry of a batch of images, in output pixels (y, x). B images, S paddle slots.

  Attributes:
    margins: [B] the paddle margin drawn for each image.
    ids: [B, S] patch id of each paddle (see `Stencils`). Slots 0..2C-1 hold the two targets'
      paddles in growth order (even slots: target 0), then come the distractors'.
    starts: [B, S, 2] where each paddle starts (a seed's tail, an extension's head).
    num_paddles: [B] slots in use.
    origins, terminals: [B, 2, 2] the seed tails and last heads of the two targets.
    markers: [B, 2, 2] the marked origin, then the marked terminal.
    labels: [B] 1 when both markers sit on the same target.
    num_distractors: [B] distractor snakes placed.
  """
  margins: np.ndarray
  ids: np.ndarray
  starts: np.ndarray
  num_paddles: np.ndarray
  origins: np.ndarray
  terminals: np.ndarray
  markers: np.ndarray
  labels: np.ndarray
  num_distractors: np.ndarray


@dataclasses.dataclass
class _Targets:
  """Finished target pairs: maps and paddles (flat starts), one row each."""
  occ: np.ndarray
  dil: np.ndarray
  busy: np.ndarray
  ids: np.ndarray
  starts: np.ndarray


def _first_seed_cells(p: Params, k: Stencils) -> tuple[np.ndarray, np.ndarray]:
  """Per seed degree, the cells (flat image index, padded [360, C]) and count of first target
  tails: those whose kernel avoids a frame 2 * seed_distance wide (outside the image is free,
  as for OpenCV)."""
  n, band = p.resolution, 2 * p.seed_distance
  lined = np.zeros((k.width, k.width), dtype=bool)
  lined[k.pad:k.pad + n, k.pad:k.pad + n] = True
  lined[k.pad + band:k.pad + n - band, k.pad + band:k.pad + n - band] = False
  cells = [np.flatnonzero(~kernel_hits(lined, kernel, k, n)) for kernel in k.seed_kernel]
  count = np.array([len(c) for c in cells])
  table = np.zeros((len(cells), max(1, count.max())), dtype=np.int64)
  for i, c in enumerate(cells):
    table[i, :len(c)] = c
  return table, count


_FIRST_SEEDS: dict = {}


def _seed_targets(p: Params, k: Stencils, rng: np.random.Generator, count: int):
  """`initialize_two_seeds` for `count` attempts; returns the successful ones' two seeds as
  (tails [A, 2, 2], gaps [A, 2, 2], angles [A, 2], ids [A, 2])."""
  key = (p, k.margin)
  if key not in _FIRST_SEEDS:
    _FIRST_SEEDS[key] = _first_seed_cells(p, k)
  table, counts = _FIRST_SEEDS[key]
  n, half = p.resolution, NUM_SEED_DEGREES // 2
  # First seed: a direction whose kernel fits nowhere ends the attempt; a head or gap outside
  # the image draws again (3 draws in all).
  degree = rng.integers(-half, half, size=(count, TRIALS))
  available = counts[degree + half]
  usable = k.seed_usable[degree + half] & (available > 0)
  cell = table[degree + half, (rng.random((count, TRIALS)) * available).astype(np.int64)]
  y, x = np.divmod(cell, n)
  gap, inside = seed_gap(p, k, y, x, seed_angle(degree))
  decided = ~usable | inside
  t = np.argmax(decided, axis=1)
  a = np.arange(count)
  ok = decided.any(axis=1) & usable[a, t] & inside[a, t]
  first = (np.stack([y[a, t], x[a, t]], 1), gap[a, t], seed_angle(degree[a, t]), degree[a, t])
  # Second seed: seed_distance from the first tail in a whole-degree direction, unchecked.
  degree2 = rng.integers(-half, half, size=(count, TRIALS))
  phi = seed_angle(rng.integers(0, 360, size=(count, TRIALS)))
  y2 = np.round(first[0][:, :1] + p.seed_distance * np.sin(phi)).astype(np.int64)
  x2 = np.round(first[0][:, 1:] + p.seed_distance * np.cos(phi)).astype(np.int64)
  gap2, inside2 = seed_gap(p, k, y2, x2, seed_angle(degree2))
  t2 = np.argmax(inside2, axis=1)
  ok &= inside2.any(axis=1)
  second = (np.stack([y2[a, t2], x2[a, t2]], 1), gap2[a, t2], seed_angle(degree2[a, t2]),
            degree2[a, t2])
  return tuple(np.stack([f[ok], s[ok]], 1) for f, s in zip(first, second))


class _SeedQueue:
  """Successful target seedings, drawn SEED_BATCH candidates at a time and handed out in order."""

  def __init__(self, p: Params, k: Stencils, rng: np.random.Generator):
    self.p, self.k, self.rng = p, k, rng
    self.items = _seed_targets(p, k, rng, 0)
    self.drawn = self.kept = 0

  def take(self, count: int) -> tuple:
    """(tails [count, 2, 2], gaps [count, 2, 2], angles [count, 2], degrees [count, 2])."""
    while len(self.items[0]) < count:
      # Enough candidates for the shortfall at the success rate seen so far.
      draws = max(SEED_BATCH, int(np.ceil((count - len(self.items[0])) * 1.25
                                          * (self.drawn + 16) / (self.kept + 1))))
      new = _seed_targets(self.p, self.k, self.rng, draws)
      self.drawn, self.kept = self.drawn + draws, self.kept + len(new[0])
      self.items = tuple(np.concatenate([a, b]) for a, b in zip(self.items, new))
    out = tuple(a[:count] for a in self.items)
    self.items = tuple(a[count:] for a in self.items)
    return out


def _grow_targets(p: Params, k: Stencils, rng: np.random.Generator, needed: int) -> _Targets:
  """The first `needed` successful `two_snakes` attempts, grown side by side in a pool."""
  pool, slots = min(TARGET_POOL, 16 + 4 * needed), 2 * p.contour_length
  maps = Maps(p, k, pool, rng, count_busy=False)
  alive = np.zeros(pool, dtype=bool)
  steps = np.zeros(pool, dtype=np.int64)
  gap = np.zeros((pool, 2, 2), dtype=np.int64)
  angle = np.zeros((pool, 2))
  last_id = np.zeros((pool, 2), dtype=np.int64)
  last_start = np.zeros((pool, 2), dtype=np.int64)
  ids = np.zeros((pool, slots), dtype=np.int64)
  starts = np.zeros((pool, slots), dtype=np.int64)
  out = _Targets(occ=np.zeros((needed, k.width ** 2), np.uint8),
                 dil=np.zeros((needed, k.width ** 2), np.uint8),
                 busy=np.zeros(needed, np.int64), ids=np.zeros((needed, slots), np.int64),
                 starts=np.zeros((needed, slots), np.int64))
  seeds = _SeedQueue(p, k, rng)
  got = 0
  while got < needed:
    fill = np.flatnonzero(~alive)
    if len(fill) * 8 >= pool or len(fill) == pool:  # refill in bulk: fewer, larger steps
      tails, gap[fill], angle[fill], degrees = seeds.take(len(fill))
      alive[fill], steps[fill] = True, 0
      last_id[fill] = degrees + NUM_SEED_DEGREES // 2
      last_start[fill] = k.flat(tails[:, :, 0], tails[:, :, 1])
      ids[fill, :2], starts[fill, :2] = last_id[fill], last_start[fill]
    live = np.flatnonzero(alive)
    snake = steps[live] % 2
    ok, new_gap, new_angle, new_id, new_start = maps.extend(
        live, gap[live, snake], angle[live, snake], last_id[live, snake],
        last_start[live, snake])
    dead = live[~ok]
    good, snake = live[ok], snake[ok]
    gap[good, snake], angle[good, snake] = new_gap[ok], new_angle[ok]
    last_id[good, snake], last_start[good, snake] = new_id[ok], new_start[ok]
    ids[good, 2 + steps[good]], starts[good, 2 + steps[good]] = new_id[ok], new_start[ok]
    steps[good] += 1
    done = good[steps[good] == slots - 2]
    if len(done):
      maps.map(done, last_id[done, 1], last_start[done, 1])
      take = done[:needed - got]
      rows = slice(got, got + len(take))
      out.occ[rows], out.dil[rows] = maps.occ[take], maps.dil[take]
      out.ids[rows], out.starts[rows] = ids[take], starts[take]
      got += len(take)
      dead = np.concatenate([dead, done])
    maps.reset(dead)
    alive[dead] = False
  inside = k.inside[None, :] & (out.occ > 0)  # every stored level is busy
  out.busy[:] = inside.sum(axis=1)
  return out


def _distractor(maps: Maps, rows, ids, starts, count) -> np.ndarray:
  """`snakes.make_snake` once per row: a seed, then distractor_length - 1 paddles. Returns
  success [A]; a failed row's map is as before. ids/starts/count: the rows' paddle lists."""
  p, k, rng = maps.p, maps.k, maps.rng
  half, area = NUM_SEED_DEGREES // 2, p.resolution * p.resolution
  undecided = (area - maps.busy[rows]) / area >= STOP_WITH_AVAILABILITY
  seeded = np.zeros(len(rows), dtype=bool)
  tail = np.zeros((len(rows), 2), dtype=np.int64)
  gap = np.zeros((len(rows), 2), dtype=np.int64)
  degree = np.zeros(len(rows), dtype=np.int64)
  for _ in range(TRIALS):  # a head or gap outside the image draws again; all else ends it
    cand = np.flatnonzero(undecided)
    d = rng.integers(-half, half, size=len(cand))
    usable = k.seed_usable[d + half]
    undecided[cand[~usable]] = False
    cand, d = cand[usable], d[usable]
    y, x, found = maps.free_tails(rows[cand], d)
    undecided[cand[~found]] = False
    cand, d, y, x = cand[found], d[found], y[found], x[found]
    g, inside = seed_gap(p, k, y, x, seed_angle(d))
    win = cand[inside]
    seeded[win], undecided[win] = True, False
    tail[win], gap[win], degree[win] = np.stack([y, x], 1)[inside], g[inside], d[inside]
  live = np.flatnonzero(seeded)
  r = rows[live]
  saved = maps.occ[r].copy(), maps.dil[r].copy(), maps.busy[r].copy()
  slot = count[r]
  last_id = degree[live] + half
  last_start = k.flat(tail[live, 0], tail[live, 1])
  angle, gap = seed_angle(degree[live]), gap[live]
  ids[r, slot], starts[r, slot] = last_id, last_start
  alive = np.ones(len(live), dtype=bool)
  for e in range(1, p.distractor_length):
    a = np.flatnonzero(alive)
    ok, new_gap, new_angle, new_id, new_start = maps.extend(r[a], gap[a], angle[a], last_id[a],
                                                            last_start[a])
    alive[a[~ok]] = False
    a = a[ok]
    gap[a], angle[a], last_id[a], last_start[a] = new_gap[ok], new_angle[ok], new_id[ok], \
        new_start[ok]
    ids[r[a], slot[a] + e], starts[r[a], slot[a] + e] = new_id[ok], new_start[ok]
  failed = ~alive
  maps.occ[r[failed]], maps.dil[r[failed]], maps.busy[r[failed]] = (s[failed] for s in saved)
  maps.map(r[alive], last_id[alive], last_start[alive])
  count[r[alive]] += p.distractor_length
  success = np.zeros(len(rows), dtype=bool)
  success[live[alive]] = True
  return success


def make_scenes(p: Params, rng: np.random.Generator, labels: np.ndarray) -> Scenes:
  """The geometry of len(labels) images (label 1 = markers on the same target)."""
  labels = np.asarray(labels)
  b = len(labels)
  slots = 2 * p.contour_length + p.num_distractors * p.distractor_length
  margins = np.asarray(p.margins)[rng.integers(len(p.margins), size=b)]
  ids = np.zeros((b, slots), dtype=np.int64)
  starts = np.zeros((b, slots, 2), dtype=np.int64)
  count = np.zeros(b, dtype=np.int64)
  placed = np.zeros(b, dtype=np.int64)
  for margin in p.margins:
    group = np.flatnonzero(margins == margin)
    if not len(group):
      continue
    k = stencils(p, margin)
    targets = _grow_targets(p, k, rng, len(group))
    maps = Maps(p, k, 0, rng)
    maps.occ, maps.dil, maps.busy = targets.occ, targets.dil, targets.busy
    flat_ids = np.zeros((len(group), slots), dtype=np.int64)
    flat_starts = np.zeros((len(group), slots), dtype=np.int64)
    flat_ids[:, :2 * p.contour_length] = targets.ids
    flat_starts[:, :2 * p.contour_length] = targets.starts
    n_paddles = np.full(len(group), 2 * p.contour_length)
    rows = np.arange(len(group))
    for _ in range(p.num_distractors):
      pending = rows
      for _ in range(MAX_DISTRACTOR_RETRIAL + 1):
        ok = _distractor(maps, pending, flat_ids, flat_starts, n_paddles)
        placed[group[pending[ok]]] += 1
        pending = pending[~ok]
        if not len(pending):
          break
    ids[group], count[group] = flat_ids, n_paddles
    starts[group] = np.stack(np.divmod(flat_starts, k.width), -1) - k.pad
  origins = starts[:, :2]
  terminals = starts[:, 2 * p.contour_length - 2:2 * p.contour_length]
  first = rng.integers(0, 2, size=b)
  other = np.where(labels == 1, first, 1 - first)
  a = np.arange(b)
  return Scenes(margins=margins, ids=ids, starts=starts, num_paddles=count, origins=origins,
                terminals=terminals, markers=np.stack([origins[a, first], terminals[a, other]], 1),
                labels=labels, num_distractors=placed)
