"""Statistics of a generated (or released, or original-generator) Pathfinder folder.

Pixel statistics need only imgs/ and metadata/; the scene statistics (distractors placed, stroke
peaks, markers, cheap label cues) need the generator's sidecar scenes/<batch>.npy.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from lra import errors
from lra.tasks.generators.pathfinder.metadata import read_metadata

SCENES_DIR = "scenes"
# Sidecar row per image, pixel coordinates (y, x). Peaks are after the min-max stretch.
SCENE_DTYPE = np.dtype([("markers", "f4", (2, 2)), ("origins", "f4", (2, 2)),
                        ("terminals", "f4", (2, 2)), ("num_distractors", "i2"),
                        ("target_peak", "f4"), ("distractor_peak", "f4")])
HALO = (1, 15)  # the faint fringe Lanczos down-sampling leaves around strokes


def _cut_accuracies(values: np.ndarray, labels: np.ndarray):
  """Sorted values and, per cut between distinct values, the accuracy of `label = value > cut`."""
  order = np.argsort(values, kind="stable")
  v, y = values[order], labels[order].astype(bool)
  n = len(v)
  ones_below = np.concatenate([[0], np.cumsum(y)])  # positives among the i smallest
  i = np.arange(n + 1)
  cut = np.concatenate([[True], v[1:] != v[:-1], [True]])  # only between distinct values
  correct = (i - ones_below) + (ones_below[-1] - ones_below)
  return v, np.where(cut, correct / n, -1.0)


def best_threshold_accuracy(values: np.ndarray, labels: np.ndarray) -> float:
  """Accuracy of the best rule `label = [value > t]` or `label = [value <= t]`, over all t."""
  values = np.asarray(values, dtype=np.float64)
  if not len(values):
    return float("nan")
  _, accuracy = _cut_accuracies(values, np.asarray(labels))
  return float(np.max(np.maximum(accuracy, np.where(accuracy >= 0, 1 - accuracy, -1))))


def held_out_threshold_accuracy(values: np.ndarray, labels: np.ndarray) -> float:
  """The best threshold rule fitted on even-indexed images, scored on odd ones, and vice versa.

  What a classifier that sees only this value would score on unseen images.
  """
  values, labels = np.asarray(values, dtype=np.float64), np.asarray(labels).astype(bool)
  scores = []
  for fit in (slice(0, None, 2), slice(1, None, 2)):
    test = np.ones(len(values), bool)
    test[fit] = False
    v, accuracy = _cut_accuracies(values[fit], labels[fit])
    if not len(v) or not test.any():
      return float("nan")
    flipped = np.where(accuracy >= 0, 1 - accuracy, -1)
    best = int(np.argmax(np.maximum(accuracy, flipped)))
    edges = np.concatenate([[-np.inf], (v[1:] + v[:-1]) / 2, [np.inf]])
    above = values[test] > edges[best]
    if flipped[best] > accuracy[best]:
      above = ~above
    scores.append(np.mean(above == labels[test]))
  return float(np.mean(scores))


def count_components(lit: np.ndarray) -> np.ndarray:
  """8-connected components of the True pixels of each image of lit [B, H, W]: counts [B].

  Min-label propagation over the 8 neighbours with pointer jumping (label <- label[label]).
  """
  b, h, w = lit.shape
  padded = np.zeros((b, h + 2, w + 2), dtype=bool)
  padded[:, 1:-1, 1:-1] = lit
  size = padded.size
  flat_lit = padded.reshape(-1)
  labels = np.where(flat_lit, np.arange(size), size)
  offsets = [dy * (w + 2) + dx for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx]
  inner = np.flatnonzero(flat_lit)
  labels = np.append(labels, size)  # a sentinel that every unlit pixel points to
  while True:
    best = labels[inner]
    for offset in offsets:
      np.minimum(best, labels[inner + offset], out=best)
    changed = np.any(best != labels[inner])
    labels[inner] = best
    while True:  # pointer jumping: follow labels to their own labels
      jumped = labels[labels[inner]]
      if np.array_equal(jumped, labels[inner]):
        break
      labels[inner] = jumped
    if not changed:
      break
  roots = labels[inner] == inner
  return np.bincount(inner[roots] // ((h + 2) * (w + 2)), minlength=b)


def _markers_brightest(pixels: np.ndarray, markers: np.ndarray, radius: float) -> bool:
  """Is the image's brightest value found only within radius + 1 of a marker centre?"""
  yy, xx = np.mgrid[:pixels.shape[0], :pixels.shape[1]]
  near = np.zeros(pixels.shape, bool)
  for y, x in markers:
    near |= (yy - y) ** 2 + (xx - x) ** 2 <= (radius + 1) ** 2
  return bool(pixels[near].max() > pixels[~near].max(initial=0))


def _summary(x: np.ndarray) -> dict:
  if not len(x):
    return {}
  return {"mean": float(x.mean()), "std": float(x.std()), "min": float(x.min()),
          "max": float(x.max())}


def compute_stats(curv_dir: Path, marker_radius: float | None = None) -> dict:
  """Pixel, label and scene statistics of a `curv_*` folder (see the README's Pathfinder table).

  Args:
    curv_dir: holds imgs/ and metadata/ (text or np.save rows), and scenes/ when generated.
    marker_radius: in pixels, for `markers_unique_brightest`; only with scenes/.
  Returns:
    A dict: num_images, label counts, lit (> 0) fraction, mean lit value, halo (1-15) and
    bright (>= 128) fractions, a 16-bin histogram, 8-connected lit components per image, and
    the lit fraction's power to predict the label. With scenes/: distractors placed (mean and
    shares of 0, 1, ...), target and distractor stroke peaks, target end-to-end distance, the
    share of images whose markers are the unique brightest pixels, and marker distance per
    label with the accuracy of the best threshold on it (in sample and held out).
  """
  curv_dir = Path(curv_dir)
  metadata = sorted((curv_dir / "metadata").glob("*.npy"),
                    key=lambda p: (not p.stem.isdigit(), int(p.stem) if p.stem.isdigit() else 0))
  if not metadata:
    raise errors.NotFound(f"No metadata/<batch>.npy files under {curv_dir}.")
  histogram = np.zeros(256, dtype=np.int64)
  labels, lit, halo, lit_mean, components, brightest, scenes = [], [], [], [], [], [], []
  have_scenes = all((curv_dir / SCENES_DIR / p.name).exists() for p in metadata)
  for path in metadata:
    rows = read_metadata(path)
    batch_scenes = np.load(curv_dir / SCENES_DIR / path.name) if have_scenes else None
    images = []
    for k, fields in enumerate(rows):
      with Image.open(curv_dir / fields[0] / fields[1]) as image:
        pixels = np.asarray(image.convert("L"))
      images.append(pixels)
      labels.append(int(fields[3]))
      if have_scenes and marker_radius is not None:
        brightest.append(_markers_brightest(pixels, batch_scenes[k]["markers"], marker_radius))
    stack = np.stack(images)
    histogram += np.bincount(stack.ravel(), minlength=256)
    lit.append((stack > 0).mean(axis=(1, 2)))
    halo.append(((stack >= HALO[0]) & (stack <= HALO[1])).mean(axis=(1, 2)))
    lit_mean.append(stack.sum(axis=(1, 2)) / np.maximum((stack > 0).sum(axis=(1, 2)), 1))
    components.append(count_components(stack > 0))
    if have_scenes:
      scenes.append(batch_scenes)
  labels, lit, components = np.array(labels), np.concatenate(lit), np.concatenate(components)
  per_image = {"lit_fraction": lit, "halo_fraction": np.concatenate(halo),
               "mean_lit_value": np.concatenate(lit_mean), "components_per_image": components}
  total = histogram.sum()
  values = np.arange(256)
  stats = {
      "num_images": int(len(labels)),
      "num_label_0": int(np.sum(labels == 0)),
      "num_label_1": int(np.sum(labels == 1)),
      "lit_fraction": float(histogram[1:].sum() / total),
      "mean_lit_value": float((histogram[1:] * values[1:]).sum() / max(histogram[1:].sum(), 1)),
      "halo_fraction": float(histogram[HALO[0]:HALO[1] + 1].sum() / total),
      "bright_fraction": float(histogram[128:].sum() / total),
      "histogram_16_bins": [round(float(x), 6) for x in
                            histogram.reshape(16, 16).sum(axis=1) / total],
      "components_per_image": float(components.mean()),
      "lit_fraction_label_0": float(lit[labels == 0].mean()) if np.any(labels == 0) else None,
      "lit_fraction_label_1": float(lit[labels == 1].mean()) if np.any(labels == 1) else None,
      "lit_best_threshold_accuracy": best_threshold_accuracy(lit, labels),
  }
  standard_errors = {}
  if have_scenes:
    per_image.update(_scene_stats(stats, np.concatenate(scenes), labels, brightest))
    p = stats["marker_distance_held_out_accuracy"]  # each held-out image is right or wrong
    standard_errors["marker_distance_held_out_accuracy"] = float(np.sqrt(p * (1 - p) / len(labels)))
  # Standard error of each mean over images (a ratio's is approximated by its per-image values).
  standard_errors.update({key: float(np.std(v) / np.sqrt(len(v))) for key, v in per_image.items()})
  stats["standard_errors"] = standard_errors
  return stats


def _scene_stats(stats: dict, scene: np.ndarray, labels: np.ndarray, brightest: list) -> dict:
  """Adds the sidecar's statistics to `stats`; returns their per-image values."""
  if len(scene) != len(labels):
    raise errors.BadValue(f"{len(scene)} scenes for {len(labels)} images in {SCENES_DIR}/.")
  placed = scene["num_distractors"].astype(int)
  markers = scene["markers"]
  distance = np.hypot(*(markers[:, 0] - markers[:, 1]).T)
  end_to_end = np.hypot(*(scene["origins"] - scene["terminals"]).transpose(2, 0, 1)).mean(0)
  stats.update({
      "distractors_per_image": float(placed.mean()),
      "distractor_shares": [round(float(x), 4) for x in np.bincount(placed) / len(placed)],
      "target_peak": float(scene["target_peak"].mean()),
      "distractor_peak": float(scene["distractor_peak"][placed > 0].mean())
                         if np.any(placed > 0) else None,
      "target_end_to_end": float(end_to_end.mean()),
      "marker_distance_label_0": _summary(distance[labels == 0]),
      "marker_distance_label_1": _summary(distance[labels == 1]),
      "marker_distance_best_threshold_accuracy": best_threshold_accuracy(distance, labels),
      "marker_distance_held_out_accuracy": held_out_threshold_accuracy(distance, labels),
  })
  per_image = {"distractors_per_image": placed, "target_end_to_end": end_to_end}
  if brightest:
    stats["markers_unique_brightest"] = float(np.mean(brightest))
    per_image["markers_unique_brightest"] = np.array(brightest, dtype=float)
  return per_image
