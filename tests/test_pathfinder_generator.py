"""Pathfinder generator: the snakes generator's rules, the release layout, determinism, resume,
statistics against the original generator's output."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from PIL import Image

from lra.base import progress as data_progress
from lra.tasks.generators.pathfinder import generate as pg
from lra.tasks.generators.pathfinder import maps, render, snakes, stats, strokes
from lra.tasks.generators.pathfinder.metadata import read_metadata
from lra.tasks.generators.pathfinder.params import DIFFICULTIES, get_params


def _files(root):
  return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
          if p.is_file()}


def test_parameter_table_matches_lra_builders():
  # LRA's Pathfinder TFDS builder docstrings, on top of snakes2_wrapper.Args defaults:
  # paddle_length, thickness, margins, seed_distance, marker_radius, continuity,
  # distractor snakes (budget // (14 // 3)), snake contrast, paddle contrast, padding.
  expected = {32: (2, 0.5, (1,), 7, 1.5, 1.0, 5, 2.0, 0.75, 1),
              64: (5, 1.0, (1,), 12, 2.5, 1.8, 5, 0.8, 1.0, 1),
              128: (5, 1.5, (2, 3), 20, 3.0, 1.8, 8, 0.9, 1.0, 1),
              256: (5, 2.0, (3,), 27, 5.0, 1.8, 7, 1.0, 1.0, 22)}
  for res, row in expected.items():
    p = get_params(res, "hard")
    assert (p.paddle_length, p.paddle_thickness, p.margins, p.seed_distance, p.marker_radius,
            p.continuity, p.num_distractors, p.snake_contrast, p.paddle_contrast,
            p.padding) == row
  for difficulty, (folder, length) in DIFFICULTIES.items():
    p = get_params(32, difficulty)
    assert (p.folder, p.contour_length, p.distractor_length) == (folder, length, length // 3)
    assert p.num_distractors == 20 // (length // 3)
  assert get_params(128, "easy").num_distractors == 17  # 35 // 2: "some report ~17"
  with pytest.raises(ValueError, match="32, 64, 128, 256"):
    get_params(48, "hard")
  with pytest.raises(ValueError, match="easy"):
    get_params(32, "medium")


@pytest.mark.parametrize("resolution", [32, 128])
def test_candidate_steps_are_the_originals_circle_for_every_gap(resolution):
  # get_coords_cmf: (gap + r (sin, cos)).astype(int) over angles one pixel of arc apart, points
  # outside dropped (on the float values), distinct. The table adds floor(r (sin, cos)).
  p = get_params(resolution, "hard")
  k = strokes.stencils(p, p.margins[0])
  r = p.paddle_length + k.margin
  angles = np.arange(0, 360, 360.0 / (2 * r * np.pi)) * np.pi / 180
  for gy in range(-2, resolution + 2):
    for gx in (-1, 0, 3, resolution // 2, resolution - 1, resolution):
      ys, xs = gy + r * np.sin(angles), gx + r * np.cos(angles)
      keep = (ys < resolution) & (ys >= 0) & (xs < resolution) & (xs >= 0)
      coords = np.stack([ys, xs], 1).astype(int)[keep]
      expected = np.unique(coords, axis=0) if len(coords) else np.zeros((0, 2), int)
      heads = k.heads[k.flat(gy, gx)]
      got = np.stack(np.divmod(heads[heads != strokes.BLOCKED], k.width), 1) - k.pad
      np.testing.assert_array_equal(got, expected)


def test_seed_kernels_and_the_negative_border_rule():
  p = get_params(32, "hard")
  k = strokes.stencils(p, 1)
  half, n = p.paddle_length + k.margin, p.resolution
  usable = []
  for degree in range(-180, 180):
    occupancy = k.occupancy[degree + 180]
    # The original's struct: the occupancy patch with its centre at (half + 1, half + 1) of a
    # (2 half + 1)^2 window; OpenCV reads offsets from the window's centre (half, half).
    window = np.zeros((2 * half + 1,) * 2, np.uint8)
    top = half + 1 - k.reach
    for a in range(occupancy.shape[0]):
      for b in range(occupancy.shape[1]):
        if 0 <= a + top <= 2 * half and 0 <= b + top <= 2 * half:
          window[a + top, b + top] = occupancy[a, b]
    dy, dx = np.nonzero(window == 255)
    offsets = set(zip((dy - half).tolist(), (dx - half).tolist()))
    flat = set(k.seed_kernel[degree + 180].tolist())
    assert flat == {a * k.width + b for a, b in offsets}
    # -inf outside the image: the map has a negative cell unless every pixel sees inside.
    usable.append(all(any(0 <= y + a < n and 0 <= x + b < n for a, b in offsets)
                      for y in range(n) for x in range(n)))
  np.testing.assert_array_equal(k.seed_usable, usable)
  assert sum(usable) == 30  # the original's first seed and distractor seeds: 330 of 360 fail


def test_marker_shortcut_equals_the_full_down_sampling():
  for p in (get_params(32, "hard"), get_params(128, "hard")):
    n = p.resolution
    positions = ([(y, x) for y in range(n) for x in range(n)] if n == 32 else
                 [(y, x) for y in (0, 1, 9, 10, 11, 12, 64, 115, 116, 126, 127)
                  for x in (0, 5, 11, 12, 60, 116, 127)])
    for y, x in positions:
      np.testing.assert_array_equal(render.markers_image(p, np.array([[y, x]])),
                                    strokes.marker_image(p, y, x), err_msg=f"{n}: {(y, x)}")


class _Recorder:
  """A random generator that remembers its last uniform draws."""

  def __init__(self, seed):
    self.rng = np.random.default_rng(seed)
    self.last = None

  def random(self, size=None):
    self.last = self.rng.random(size)
    return self.last

  def integers(self, *args, **kwargs):
    return self.rng.integers(*args, **kwargs)


def _full_map(p, k, paddles, frame=True):
  """The original's float occupancy of the frame and paddles (id, flat start), clipped."""
  n = p.resolution
  out = strokes.level(k.frame.reshape(k.width, k.width)[k.pad:k.pad + n, k.pad:k.pad + n])
  out *= frame
  r = k.reach
  for i, start in paddles:
    y, x = np.divmod(start, k.width) - np.array(k.pad)
    patch = strokes.level(k.occupancy[i])
    for a in range(2 * r + 1):
      for b in range(2 * r + 1):
        if 0 <= y - r + a < n and 0 <= x - r + b < n:
          out[y - r + a, x - r + b] = max(out[y - r + a, x - r + b], patch[a, b])
  return out


def _naive_extend(p, k, mask, gap, angle, draws):
  """`snakes.extend_snake` transcribed on a full float map: (ok, head (y, x), direction j)."""
  n, m = p.resolution, k.margin
  dilated = np.zeros_like(mask)
  for dy, dx in zip(*strokes.disk_offsets(m)):
    shifted = np.zeros_like(mask)
    shifted[max(-dy, 0):n - max(dy, 0), max(-dx, 0):n - max(dx, 0)] = \
        mask[max(dy, 0):n - max(-dy, 0), max(dx, 0):n - max(-dx, 0)]
    dilated = np.maximum(dilated, shifted)
  dist = float(p.paddle_length + 2 * m)
  py = int(np.ceil(gap[0] + dist * np.sin(angle)))
  px = int(np.ceil(gap[1] + dist * np.cos(angle)))
  r = p.paddle_length + m
  samples = np.arange(0, 360, 360.0 / (2 * r * np.pi)) * np.pi / 180
  ys, xs = py + r * np.sin(samples), px + r * np.cos(samples)
  keep = (ys < n) & (ys >= 0) & (xs < n) & (xs >= 0)
  if not keep.any():
    return False, None, None
  coords = np.unique(np.stack([ys, xs], 1).astype(int)[keep], axis=0)
  orientation = np.arctan2(coords[:, 0] - py, coords[:, 1] - px)
  delta = np.minimum(np.abs(orientation - angle), 2 * np.pi - np.abs(orientation - angle))
  weight = np.maximum(np.cos(np.minimum(delta * p.continuity, 0.5 * np.pi)), 0) ** 2
  pmf = (1 - dilated[coords[:, 0], coords[:, 1]]) * weight
  if pmf.sum() < 1e-4:
    return False, None, None
  cmf = np.cumsum(pmf / pmf.sum())
  for u in draws:
    head = coords[np.argmax(cmf - u > 0)]
    j = int(np.flatnonzero((k.step == head - [py, px]).all(1))[0])
    placed = _full_map(p, k, [(strokes.NUM_SEED_DEGREES + j, k.flat(*head))], frame=False)
    if np.max(mask + placed) < 1.8:
      return True, tuple(head), j
  return False, None, None


@pytest.mark.parametrize("resolution,rows,steps", [(32, 40, 12), (128, 6, 8)])
def test_growth_matches_a_direct_transcription_of_the_original(resolution, rows, steps):
  # Target attempts grown by the vectorised code; after every step the kept maps equal the
  # original's float map (dilated, and its levels above 0.3), and each row's outcome equals
  # the original's rules run on that map with the same uniform draws.
  p = get_params(resolution, "hard")
  k = strokes.stencils(p, p.margins[-1])
  rng = _Recorder(resolution)
  grid = maps.Maps(p, k, rows, rng, count_busy=True)
  tails, gap, angle, degrees = snakes._SeedQueue(p, k, rng.rng).take(rows)
  last_id = degrees + 180
  last_start = k.flat(tails[..., 0], tails[..., 1])
  mapped = [[] for _ in range(rows)]
  alive = np.ones(rows, bool)
  compared = 0
  for step in range(steps):
    s = step % 2
    live = np.flatnonzero(alive)
    if not len(live):
      break
    expected = []
    for row in live:
      mask = _full_map(p, k, mapped[row])
      expected.append((mask, gap[row, s], angle[row, s]))
    ok, new_gap, new_angle, new_id, new_start = grid.extend(
        live, gap[live, s], angle[live, s], last_id[live, s], last_start[live, s])
    for i, row in enumerate(live):
      mask, g, a = expected[i]
      want_ok, want_head, want_j = _naive_extend(p, k, mask, g, a, rng.last[i])
      assert bool(ok[i]) == want_ok, (row, step)
      if want_ok:
        head = tuple(np.divmod(new_start[i], k.width) - np.array(k.pad))
        assert head == want_head and new_id[i] == strokes.NUM_SEED_DEGREES + want_j
        mapped[row].append((last_id[row, s], last_start[row, s]))
        full = _full_map(p, k, mapped[row])
        n, q = p.resolution, k.pad
        occ = grid.occ[row].reshape(k.width, k.width)[q:q + n, q:q + n]
        np.testing.assert_array_equal(strokes.level(occ), np.where(full > 0.3, full, 0))
        dil = grid.dil[row].reshape(k.width, k.width)[q:q + n, q:q + n]
        np.testing.assert_array_equal(strokes.level(dil), _dilated(full, k.margin))
        assert grid.busy[row] == np.count_nonzero(full > 0.3)
        compared += 1
    good = live[ok]
    gap[good, s], angle[good, s] = new_gap[ok], new_angle[ok]
    last_id[good, s], last_start[good, s] = new_id[ok], new_start[ok]
    alive[live[~ok]] = False
  assert compared >= rows  # the comparison saw real growth, not only dead ends


def _dilated(mask, margin):
  n = mask.shape[0]
  out = np.zeros_like(mask)
  for dy, dx in zip(*strokes.disk_offsets(margin)):
    shifted = np.zeros_like(mask)
    shifted[max(-dy, 0):n - max(dy, 0), max(-dx, 0):n - max(dx, 0)] = \
        mask[max(dy, 0):n - max(-dy, 0), max(dx, 0):n - max(-dx, 0)]
    out = np.maximum(out, shifted)
  return out


def test_distractor_tails_are_free_and_uniform_when_few_cells_are():
  p = get_params(32, "hard")
  k = strokes.stencils(p, 1)
  rng = np.random.default_rng(0)
  grid = maps.Maps(p, k, 400, rng)
  n, q = p.resolution, k.pad
  square = grid.occ.reshape(-1, k.width, k.width)
  square[:, q:q + n, q:q + n] = 255
  square[:, q + 10:q + 13, q + 20:q + 23] = 0  # a 3x3 hole: the draws rarely hit it
  degree = np.flatnonzero(k.seed_usable)[0] - 180
  y, x, found = grid.free_tails(np.arange(400), np.full(400, degree))
  offsets = k.seed_kernel[degree + 180]
  free = [cell for cell in range(n * n)
          if not k.busy[square[0].reshape(-1)[k.flat(*divmod(cell, n)) + offsets]].any()]
  assert found.all() and len(free) >= 1
  assert set(zip(*np.divmod(free, n))) >= set(zip(y.tolist(), x.tolist()))
  counts = np.unique(y * n + x, return_counts=True)[1]
  assert len(counts) == len(free) and counts.min() > 400 / len(free) / 3
  square[:, q:q + n, q:q + n] = 255
  assert not grid.free_tails(np.arange(3), np.full(3, degree))[2].any()


def _naive_components(lit):
  seen, count = np.zeros_like(lit), 0
  h, w = lit.shape
  for y0 in range(h):
    for x0 in range(w):
      if lit[y0, x0] and not seen[y0, x0]:
        count += 1
        stack = [(y0, x0)]
        seen[y0, x0] = True
        while stack:
          y, x = stack.pop()
          for a in (-1, 0, 1):
            for b in (-1, 0, 1):
              if 0 <= y + a < h and 0 <= x + b < w and lit[y + a, x + b] and not seen[y + a, x + b]:
                seen[y + a, x + b] = True
                stack.append((y + a, x + b))
  return count


def test_components_match_a_flood_fill():
  rng = np.random.default_rng(0)
  lit = rng.random((12, 20, 17)) < np.linspace(0.1, 0.7, 12)[:, None, None]
  lit[0] = False
  lit[1, 3:15, 8] = True  # a long line: many propagation steps
  np.testing.assert_array_equal(stats.count_components(lit), [_naive_components(x) for x in lit])


def test_threshold_accuracies():
  rng = np.random.default_rng(0)
  for _ in range(20):
    values = rng.integers(0, 6, size=30).astype(float)
    labels = rng.integers(0, 2, size=30)
    best = 0.0
    for threshold in np.concatenate([[-1.0], np.unique(values)]):
      accuracy = np.mean((values > threshold) == labels)
      best = max(best, accuracy, 1 - accuracy)
    assert stats.best_threshold_accuracy(values, labels) == pytest.approx(best)
  # Held out: a rule fitted on one half, scored on the other.
  values = np.array([0.0, 1, 2, 3, 10, 11, 12, 13])
  assert stats.held_out_threshold_accuracy(values, values >= 10) == 1.0
  assert stats.held_out_threshold_accuracy(values, values < 10) == 1.0
  for _ in range(20):
    values = rng.integers(0, 8, size=17).astype(float)
    labels = rng.integers(0, 2, size=17)
    assert stats.held_out_threshold_accuracy(values, labels) == pytest.approx(
        np.mean([_fold(values, labels, 0), _fold(values, labels, 1)]))


def _fold(values, labels, fit):
  """Brute-force held-out accuracy: best cut on rows fit::2, scored on the others."""
  train = np.zeros(len(values), bool)
  train[fit::2] = True
  best, rule = -1.0, None
  v = np.sort(np.unique(values[train]))
  cuts = np.concatenate([[-np.inf], (v[1:] + v[:-1]) / 2, [np.inf]])
  for cut in cuts:
    for flip in (False, True):
      accuracy = np.mean(((values[train] > cut) ^ flip) == labels[train])
      if accuracy > best:
        best, rule = accuracy, (cut, flip)
  return np.mean(((values[~train] > rule[0]) ^ rule[1]) == labels[~train])


def test_layout_and_metadata_format(tmp_path):
  curv = pg.generate(tmp_path, 32, "easy", num_images=25, seed=1, progress=False,
                     images_per_batch=10)
  assert curv == tmp_path / "pathfinder32" / "curv_baseline"
  assert sorted(p.name for p in (curv / "metadata").iterdir()) == ["0.npy", "1.npy", "2.npy"]
  for batch, size in ((0, 10), (1, 10), (2, 5)):
    text = (curv / "metadata" / f"{batch}.npy").read_text()
    assert text.endswith("\n")
    lines = text.splitlines()
    assert len(lines) == size
    for k, line in enumerate(lines):
      fields = line.split(" ")
      assert fields[:3] == [f"imgs/{batch}", f"sample_{k}.png", str(k)]
      assert fields[3] in ("0", "1")
      # continuity, contour_length, distractor_length, paddle_length, thickness, margin, n_contrasts
      assert fields[4:] == ["1.0", "6", "2", "2", "0.5", "1", "1"]
      with Image.open(curv / fields[0] / fields[1]) as image:
        pixels = np.asarray(image)
        assert image.mode == "L" and image.size == (32, 32)
        assert pixels.min() == 0 and pixels.max() == 255  # the min-max stretch
    assert len(list((curv / "imgs" / str(batch)).iterdir())) == size
    assert len(np.load(curv / stats.SCENES_DIR / f"{batch}.npy")) == size


def test_pathx_margins_and_metadata(tmp_path):
  curv = pg.generate(tmp_path, 128, "hard", num_images=6, seed=0, progress=False)
  rows = read_metadata(curv / "metadata" / "0.npy")
  assert {row[9] for row in rows} <= {"2", "3"}
  assert all(row[4:9] + row[10:] == ["1.8", "14", "4", "5", "1.5", "1"] for row in rows)
  scenes = np.load(curv / stats.SCENES_DIR / "0.npy")
  assert (scenes["num_distractors"] <= 8).all()


def test_same_seed_same_bytes_for_any_worker_count(tmp_path, monkeypatch, capsys):
  kwargs = dict(resolution=32, difficulty="hard", num_images=24, seed=7, progress=False,
                images_per_batch=8)
  one = pg.generate(tmp_path / "one", workers=1, **kwargs)
  monkeypatch.setattr(data_progress, "DELAY_S", 0.0)  # shown however quick
  two = pg.generate(tmp_path / "two", workers=2, **{**kwargs, "progress": True})
  assert _files(one) == _files(two)
  # The workers' batches are counted as they finish, off a terminal one line per tenth reached.
  lines = capsys.readouterr().err.splitlines()
  assert len(lines) == 3 and lines[-1].startswith(
      "pathfinder32/curv_contour_length_14: generating: 24/24 images (100%)")
  other = pg.generate(tmp_path / "other", workers=1, **{**kwargs, "seed": 8})
  assert _files(other)["imgs/0/sample_0.png"] != _files(one)["imgs/0/sample_0.png"]


def test_resume_after_a_kill_gives_the_same_files(tmp_path):
  kwargs = dict(resolution=32, difficulty="easy", num_images=20, seed=3, progress=False,
                images_per_batch=10)
  whole = _files(pg.generate(tmp_path / "whole", **kwargs))
  curv = pg.generate(tmp_path / "killed", **kwargs)
  (curv / "imgs" / "0" / "sample_0.png").write_bytes(b"finished batches are not redone")
  # Killed inside batch 1: some images written, its scenes and metadata not yet.
  (curv / "metadata" / "1.npy").unlink()
  (curv / stats.SCENES_DIR / "1.npy").unlink()
  (curv / "imgs" / "1" / "sample_3.png").write_bytes(b"half a png")
  (curv / "imgs" / "1" / "sample_7.png").unlink()
  pg.generate(tmp_path / "killed", **kwargs)
  after = _files(curv)
  assert after.pop("imgs/0/sample_0.png") == b"finished batches are not redone"
  whole.pop("imgs/0/sample_0.png")
  assert after == whole
  with pytest.raises(ValueError, match="--seed 3"):
    pg.generate(tmp_path / "killed", **{**kwargs, "seed": 4})


def test_labels_balanced_per_batch(tmp_path):
  curv = pg.generate(tmp_path, 32, "easy", num_images=21, seed=0, progress=False,
                     images_per_batch=7)
  for path in (curv / "metadata").iterdir():
    labels = [int(row[3]) for row in read_metadata(path)]
    assert abs(sum(labels) - len(labels) / 2) <= 0.5


def test_scenes_markers_and_labels(tmp_path):
  p = get_params(32, "hard")
  labels = np.arange(40) % 2
  scenes = snakes.make_scenes(p, np.random.default_rng(0), labels)
  c = p.contour_length
  # Target paddles alternate (even slots: target 0); origins are the seed tails, terminals
  # the last heads; the first marker is an origin, the second a terminal of the same target
  # exactly when the label is 1.
  np.testing.assert_array_equal(scenes.origins, scenes.starts[:, :2])
  np.testing.assert_array_equal(scenes.terminals, scenes.starts[:, 2 * c - 2:2 * c])
  for i, label in enumerate(labels):
    (origin,) = np.flatnonzero((scenes.origins[i] == scenes.markers[i, 0]).all(1))[:1]
    same = (scenes.terminals[i, origin] == scenes.markers[i, 1]).all()
    other = (scenes.terminals[i, 1 - origin] == scenes.markers[i, 1]).all()
    assert (same if label else other)
  assert (scenes.num_paddles == 2 * c + scenes.num_distractors * p.distractor_length).all()
  assert scenes.ids[:, :2].max() < strokes.NUM_SEED_DEGREES  # seeds use seed patches
  assert (scenes.ids[:, 2:2 * c] >= strokes.NUM_SEED_DEGREES).all()


# The original generator's output (2019 snakes2.py with LRA's 32 px hard parameters and
# use_single_paddles=False, old SciPy semantics), measured on 1,000 images: the table.
ORIGINAL_32_HARD = {
    "distractors_per_image": (1.17, 0.005), "lit_fraction": (0.342, 0.0005),
    "mean_lit_value": (59, 0.5), "halo_fraction": (0.185, 0.0005),
    "components_per_image": (8.3, 0.05), "markers_unique_brightest": (0.355, 0.0005),
    "marker_distance_held_out_accuracy": (0.56, 0.005), "target_end_to_end": (13.3, 0.05),
}
ORIGINAL_COUNT = 1000


@pytest.mark.slow  # ~15 s of CPU: 2,000 images
def test_statistics_match_the_original_generator(tmp_path):
  """2,000 hard 32x32 images against the original's 1,000.

  Tolerance per statistic: 4 standard errors of the difference of two independent means,
  sqrt(se_ours^2 + se_original^2), with the original's per-image spread taken to be ours
  (se_original = se_ours * sqrt(2000 / 1000)), plus half the last digit the table was rounded
  to. A correct generator fails one of these by chance with probability < 1e-3.
  """
  curv = pg.generate(tmp_path, 32, "hard", num_images=2000, seed=0, progress=False,
                     stats=True)
  report = json.loads((curv / pg.STATS_FILE).read_text())
  n = report["num_images"]
  for key, (original, rounding) in ORIGINAL_32_HARD.items():
    se = report["standard_errors"][key]
    tolerance = 4 * math.hypot(se, se * math.sqrt(n / ORIGINAL_COUNT)) + rounding
    assert abs(report[key] - original) <= tolerance, (key, report[key], original, tolerance)
  # Distractor shares 0..4 (original .26/.40/.27/.07/.01): binomial errors.
  for share, original in zip(report["distractor_shares"], (0.26, 0.40, 0.27, 0.07, 0.01)):
    se = math.sqrt(original * (1 - original))
    assert abs(share - original) <= 4 * se * math.sqrt(1 / n + 1 / ORIGINAL_COUNT) + 0.005
  # Distractors are drawn brighter than targets (contrast 2 against 2 x 0.75).
  assert report["target_peak"] < report["distractor_peak"]


def test_stats_report(tmp_path):
  curv = pg.generate(tmp_path, 32, "hard", num_images=40, seed=2, stats=True, progress=False,
                     images_per_batch=20)
  report = json.loads((curv / pg.STATS_FILE).read_text())
  assert report == json.loads(json.dumps(stats.compute_stats(curv, marker_radius=1.5)))
  assert report["num_images"] == 40 and report["num_label_0"] == report["num_label_1"] == 20
  assert sum(report["histogram_16_bins"]) == pytest.approx(1.0, abs=1e-5)  # rounded bins
  assert 0 < report["halo_fraction"] < report["lit_fraction"] < 1
  assert sum(report["distractor_shares"]) == pytest.approx(1.0, abs=1e-3)
  scenes = np.concatenate([np.load(curv / stats.SCENES_DIR / f"{b}.npy") for b in (0, 1)])
  assert report["distractors_per_image"] == pytest.approx(scenes["num_distractors"].mean())
  # The sidecar's markers are where the marker disks were drawn.
  with Image.open(curv / "imgs" / "0" / "sample_0.png") as image:
    pixels = np.asarray(image).astype(int)
  bare = render.markers_image(get_params(32, "hard"), scenes["markers"][0].astype(int))
  assert (pixels[bare == 255] > 0).all()


def test_cli_generate_then_prepare_reads_every_image(tmp_path, capsys):
  from lra.cli import main
  from lra.tasks.contract.cache import PreparedData
  raw, data = tmp_path / "raw", tmp_path / "data"
  assert main(["data", "generate", "pathfinder", "--out", str(raw), "--difficulty", "easy",
               "--num-images", "30", "--seed", "2", "--stats"]) == 0
  assert "lra data prepare pathfinder" in capsys.readouterr().out
  curv = raw / "pathfinder32" / "curv_baseline"
  assert (curv / pg.STATS_FILE).exists()
  assert main(["data", "prepare", "pathfinder", "--source", str(raw), "--data-dir", str(data),
               "--option", "difficulty=easy"]) == 0
  prepared = PreparedData(data / "pathfinder")
  rows, labels = [], []
  for split in ("train", "val", "test"):
    arrays = prepared.split(split)
    rows += [np.asarray(r).astype(np.uint8).tobytes() for r in arrays["inputs"]]
    labels += np.asarray(arrays["label"]).tolist()
  expected_rows, expected_labels = [], []
  for fields in read_metadata(curv / "metadata" / "0.npy"):
    with Image.open(curv / fields[0] / fields[1]) as image:
      expected_rows.append(np.asarray(image).tobytes())
    expected_labels.append(int(fields[3]))
  assert sorted(zip(rows, labels)) == sorted(zip(expected_rows, expected_labels))


@pytest.mark.slow  # JAX compiles a 1,024-token model: ~15 s of CPU
def test_generated_hard_set_trains_a_few_steps(tmp_path):
  from lra import run
  result = run.run("pathfinder", "softmax", preset="smoke", data_dir=tmp_path / "data",
                   run_dir=tmp_path / "run", progress=False,
                   overrides=["data.generator.num_images=40", "train.num_steps=2",
                              "eval.every_steps=2", "train.log_every_steps=1"])
  assert result["status"] == "complete" and result["step"] == 2
  [meta_path] = (tmp_path / "data").glob("pathfinder_smoke-*/meta.json")  # one per recipe
  meta = json.loads(meta_path.read_text())
  assert meta["seq_len"] == 1024 and sum(meta["splits"].values()) == 40
  assert "curv_contour_length_14" in meta["source"]["path"]
