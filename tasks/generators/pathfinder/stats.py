"""Statistics of a generated (or released) Pathfinder folder, and the check that no cheap cue
(marker distance, amount of ink) gives the label away."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

MARKERS_DIR = "markers"  # generator sidecar: markers/<batch>.npy, float32 [N, 4] (y0, x0, y1, x1)


def best_threshold_accuracy(values: np.ndarray, labels: np.ndarray) -> float:
  """Accuracy of the best rule `label = [value > t]` or `label = [value <= t]`, over all t.

  Ties are split consistently: a threshold falls only between distinct values.
  """
  values = np.asarray(values, dtype=np.float64)
  labels = np.asarray(labels).astype(bool)
  n = len(values)
  if n == 0:
    return float("nan")
  order = np.argsort(values, kind="stable")
  v, y = values[order], labels[order]
  ones_below = np.concatenate([[0], np.cumsum(y)])  # positives among the i smallest
  i = np.arange(n + 1)
  cut = np.concatenate([[True], v[1:] != v[:-1], [True]])  # thresholds between distinct values
  # Predict 1 above the cut: correct = zeros below + ones above.
  correct = (i - ones_below) + (ones_below[-1] - ones_below)
  correct = np.maximum(correct, n - correct)[cut]
  return float(correct.max() / n)


def read_metadata(path: Path) -> list[list[str]]:
  """The rows of one release metadata file (text lines despite the .npy suffix)."""
  rows = []
  for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
    if not line.strip():
      continue
    fields = line.split()
    if len(fields) != 11:
      raise ValueError(f"{path}:{number}: expected 11 space-separated fields "
                       f"(imgs/<batch> sample_<k>.png <k> <label> ...), found {len(fields)}")
    rows.append(fields)
  return rows


def compute_stats(curv_dir: Path) -> dict:
  """Pixel, label and marker statistics of a `curv_*` folder.

  Returns a dict with num_images, label counts, the fraction of lit (> 0) and bright (>= 128)
  pixels, a 16-bin intensity histogram (fractions of all pixels), per-label mean lit fraction
  and the best-threshold accuracy of the lit-pixel count, and, when the generator's markers/
  sidecar is there, the marker distance (pixels) per label and its best-threshold accuracy.
  Both accuracies should be near 0.5: otherwise a cheap cue gives the label away.
  """
  curv_dir = Path(curv_dir)
  metadata = sorted((curv_dir / "metadata").glob("*.npy"), key=lambda p: int(p.stem))
  if not metadata:
    raise FileNotFoundError(f"No metadata/<batch>.npy files under {curv_dir}.")
  histogram = np.zeros(256, dtype=np.int64)
  labels, lit, distances = [], [], []
  have_markers = True
  for path in metadata:
    rows = read_metadata(path)
    markers_path = curv_dir / MARKERS_DIR / path.name
    if have_markers and markers_path.exists():
      markers = np.load(markers_path)
      distances.append(np.hypot(markers[:, 0] - markers[:, 2], markers[:, 1] - markers[:, 3]))
    else:
      have_markers = False
    for fields in rows:
      with Image.open(curv_dir / fields[0] / fields[1]) as image:
        pixels = np.asarray(image.convert("L"))
      histogram += np.bincount(pixels.ravel(), minlength=256)
      lit.append(np.count_nonzero(pixels) / pixels.size)
      labels.append(int(fields[3]))
  labels = np.array(labels)
  lit = np.array(lit)
  total = histogram.sum()
  stats = {
      "num_images": int(len(labels)),
      "num_label_0": int(np.sum(labels == 0)),
      "num_label_1": int(np.sum(labels == 1)),
      "lit_fraction": float(histogram[1:].sum() / total),
      "bright_fraction": float(histogram[128:].sum() / total),
      "histogram_16_bins": [round(float(x), 6) for x in
                            histogram.reshape(16, 16).sum(axis=1) / total],
      "lit_fraction_label_0": float(lit[labels == 0].mean()) if np.any(labels == 0) else None,
      "lit_fraction_label_1": float(lit[labels == 1].mean()) if np.any(labels == 1) else None,
      "lit_best_threshold_accuracy": best_threshold_accuracy(lit, labels),
  }
  if have_markers:
    distance = np.concatenate(distances)
    stats.update({
        "marker_distance_label_0": _summary(distance[labels == 0]),
        "marker_distance_label_1": _summary(distance[labels == 1]),
        "marker_distance_best_threshold_accuracy": best_threshold_accuracy(distance, labels),
    })
  return stats


def _summary(x: np.ndarray) -> dict:
  if not len(x):
    return {}
  return {"mean": float(x.mean()), "std": float(x.std()), "min": float(x.min()),
          "max": float(x.max())}
