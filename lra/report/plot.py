"""Figures of run folders without Jupyter: `lra plot RUN...` draws their curves in one PNG, and the
notebooks' accuracy-against-speed figure is drawn here too (no label over another, one colour
per mixer). Figures are built on matplotlib's Figure, not pyplot, so no display is needed.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import math
import re
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from lra import errors
from lra.report import results

DPI = 120


def find_runs(paths: Sequence[str | Path]) -> list[Path]:
  """Run folders (holding metrics.jsonl or final.json) named by `paths`: run folders, folders
  holding runs at any depth (results/local/runs/listops), or glob patterns of either.

  Raises:
    FileNotFoundError: a path that matches nothing, or no run at all.
  """
  found: list[Path] = []
  for pattern in map(str, paths):
    matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
    matches = [Path(m) for m in matches if Path(m).exists()]
    if not matches:
      raise errors.NotFound(f"{pattern}: no such run folder (lra plot takes run folders, "
                            "folders of runs such as results/local/runs, or globs)")
    for path in matches:
      if _is_run(path):
        found.append(path)
      elif path.is_dir():
        found += sorted({p.parent for name in ("metrics.jsonl", "final.json")
                         for p in path.rglob(name) if "checkpoints" not in p.parts})
  runs = list(dict.fromkeys(found))  # in the order given, each once
  if not runs:
    raise errors.NotFound("no run folder (one holding metrics.jsonl) in "
                          + ", ".join(map(str, paths)))
  return runs


def _is_run(path: Path) -> bool:
  return (path / "metrics.jsonl").is_file() or (path / "final.json").is_file()


def _read_json(path: Path) -> dict:
  try:
    data = json.loads(path.read_text())
  except (OSError, ValueError):
    return {}
  return data if isinstance(data, dict) else {}


def run_identity(run_dir: Path) -> dict:
  """task, mixer, run (the folder's name: preset, departures, seed) and final.json's status and
  majority-class accuracy, from the run's files (its path where they say nothing)."""
  final = _read_json(run_dir / "final.json")
  config = _read_json(run_dir / "config.json")
  return {"task": final.get("task") or config.get("task") or run_dir.parent.parent.name,
          "mixer": final.get("mixer") or config.get("model", {}).get("mixer")
          or run_dir.parent.name,
          "run": run_dir.name, "status": final.get("status"),
          "majority": final.get("majority_accuracy")}


PARTS = ("task", "mixer", "run")  # what names a run, most general first


def _values(ids: Sequence[dict], part: str) -> list[str]:
  """The distinct values of one part of the runs' names, in the order given."""
  return list(dict.fromkeys(i[part] for i in ids))


def run_labels(run_dirs: Sequence[Path]) -> tuple[str, list[str]]:
  """(title, one label per run): what all runs share goes to the title, what tells them apart
  to their labels (task/mixer/run, the run name holding preset, departures and seed). Runs equal
  in all three (the same run in two results folders) are told apart by their folder. Runs of
  several tasks are titled with the tasks ("listops + pathfinder: 2 runs")."""
  ids = [run_identity(d) for d in run_dirs]
  parts = PARTS
  if len(ids) == 1:
    shared = list(parts)
    title = " / ".join(ids[0][p] for p in parts)
  else:
    shared = [p for p in parts if len({i[p] for i in ids}) == 1]
    title = " / ".join(ids[0][p] for p in shared) if shared else ""
    if "task" not in shared:
      title = " / ".join([" + ".join(_values(ids, "task")) + f": {len(ids)} runs",
                          *(ids[0][p] for p in shared)])
  labels = ["/".join(i[p] for p in parts if p not in shared) or i["run"] for i in ids]
  if len(set(labels)) < len(labels):
    labels = [f"{label} ({d.parent.parent.parent})" for label, d in zip(labels, run_dirs)]
  labels = [label + (f" [{i['status']}]" if i["status"] not in (None, "complete") else "")
            for label, i in zip(labels, ids)]
  return title, labels


def distinct_colours(n: int) -> list[tuple]:
  """n colours, none repeated: tab10's for up to 10; up to 20 tab20's dark shades then its light
  ones (each pair of one hue far apart in the order); beyond, evenly spaced hues."""
  if n <= 10:
    return [colormaps["tab10"](i) for i in range(n)]
  if n <= 20:
    return [colormaps["tab20"](i) for i in (*range(0, 20, 2), *range(1, 20, 2))][:n]
  return [colormaps["hsv"](i / n) for i in range(n)]


def curves_figure(run_dirs: Sequence[Path]) -> Figure:
  """Val and test accuracy (%) and train and val loss against steps, one colour per run, the run
  labels in one legend under both panels. Runs without a curve yet are left out with a warning."""
  title, labels = run_labels(run_dirs)
  drawn = []
  for run_dir, label in zip(run_dirs, labels):
    curves = results.load_curves(run_dir)
    if len(curves.columns) > 1:
      drawn.append((run_dir, label, curves))
    else:
      warnings.warn(f"{run_dir} has no curve yet (no metrics.jsonl record); left out",
                    results.RunFileWarning, stacklevel=2)
  if not drawn:
    raise errors.BadValue("none of the runs has a curve yet: nothing to plot")
  # As many legend columns as labels of this length fit across the figure (~150 characters).
  longest = max(len(label) for _, label, _ in drawn)
  columns = max(1, min(4, len(drawn), 150 // (longest + 8)))
  legend_rows = math.ceil(len(drawn) / columns)
  fig = Figure(figsize=(12, 4.2 + 0.25 * legend_rows), dpi=DPI, layout="constrained")
  accuracy, loss = fig.subplots(1, 2)
  handles = []
  drawn = _same_curves_named(drawn)
  for index, ((run_dir, label, curves), colour) in enumerate(
      zip(drawn, distinct_colours(len(drawn)))):
    for ax, key, style, scale in ((accuracy, "val/accuracy", "-", 100),
                                  (accuracy, "test/accuracy", "--", 100),
                                  (loss, "train/loss", "-", 1), (loss, "val/loss", "--", 1)):
      if key in curves:
        points = curves.dropna(subset=[key])
        # Each run its own marker, so a curve drawn exactly under another still shows.
        (line,) = ax.plot(points["step"], scale * points[key], style, color=colour,
                          marker=(MARKERS[index % len(MARKERS)] if key.startswith(("val", "test"))
                                  else None), markersize=4, markerfacecolor="none",
                          linewidth=1.0 if key == "train/loss" else 1.4, label=label)
        line.set_gid(f"{run_dir}|{key}")  # which run and metric, for tests and SVG readers
        if key == "val/accuracy" or (key == "train/loss" and "val/accuracy" not in curves):
          handles.append(line)
  majorities = {round(run_identity(d)["majority"] or -1, 6) for d, _, _ in drawn}
  if len(majorities) == 1 and majorities != {-1}:
    majority = accuracy.axhline(100 * majorities.pop(), color="0.5", linestyle=":",
                                linewidth=1, label="majority class")
    accuracy.legend(handles=[majority], loc="lower right", fontsize="small")
  accuracy.set(xlabel="step", ylabel="accuracy (%)",
               title="accuracy: val (solid), test (dashed)")
  loss.set(xlabel="step", ylabel="loss", title="loss: train (solid), val (dashed)")
  for ax in (accuracy, loss):
    ax.grid(alpha=0.3)
  fig.suptitle(title)
  fig.legend(handles=handles, labels=[h.get_label() for h in handles], loc="outside lower center",
             ncols=columns, fontsize="small", frameon=False)
  return fig


MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*")
CURVE_KEYS = ("val/accuracy", "test/accuracy", "train/loss", "val/loss")


def _same_curves_named(drawn: list[tuple[Path, str, pd.DataFrame]]
                       ) -> list[tuple[Path, str, pd.DataFrame]]:
  """The runs to draw, a run whose curves equal an earlier one's labelled so ("same curves as
  X"): drawn one over the other, the later would hide the first."""
  named = []
  for run_dir, label, curves in drawn:
    keys = ["step", *(k for k in CURVE_KEYS if k in curves)]
    twin = next((other for _, other, theirs in named if set(keys) <= set(theirs.columns)
                 and theirs[keys].reset_index(drop=True).equals(
                     curves[keys].reset_index(drop=True))), None)
    named.append((run_dir, label + (f" (same curves as {twin})" if twin else ""), curves))
  return named


MAX_NAME = 100  # characters of a default file name before it is cut and given a digest


def default_output(run_dirs: Sequence[Path], results_dir: Path) -> Path:
  """results_dir/plots/TASK_MIXER_RUN.png, each part the runs' values joined by "+" (e.g.
  listops_latte+softmax_demo_seed0.png), so other runs get another file. A name longer than
  MAX_NAME is cut and ends in a digest of the run folders."""
  ids = [run_identity(d) for d in run_dirs]
  name = "_".join("+".join(_values(ids, part)) for part in PARTS)
  name = re.sub(r"[^A-Za-z0-9._=+,-]+", "_", name).strip("_") or "curves"
  if len(name) > MAX_NAME:
    digest = hashlib.sha256("\n".join(sorted(str(d.resolve()) for d in run_dirs)).encode())
    name = f"{name[:MAX_NAME - 10].rstrip('_+,.')}_{digest.hexdigest()[:8]}"
  return Path(results_dir) / "plots" / f"{name}.png"


def main(args: argparse.Namespace) -> int:
  """`lra plot RUN... [-o FILE.png]`: writes the PNG and prints its path (and that it replaced a
  file, if one was there); warns, in one line, when the runs are of more than one task."""
  run_dirs = find_runs(args.runs)
  tasks = _values([run_identity(d) for d in run_dirs], "task")
  if len(tasks) > 1:
    print(f"lra plot: warning: runs of {len(tasks)} tasks ({', '.join(tasks)}) in one figure: "
          "their steps and accuracies do not compare; one task per plot reads better",
          file=sys.stderr)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", results.RunFileWarning)
    fig = curves_figure(run_dirs)
  for warning in caught:
    print(f"lra plot: warning: {warning.message}", file=sys.stderr)
  out = Path(args.output) if args.output else default_output(run_dirs, args.results_dir)
  replaced = out.exists()
  out.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(out, dpi=DPI)
  print(f"wrote {out} ({len(run_dirs)} run{'s' if len(run_dirs) > 1 else ''})"
        + ("; it replaced the file of that name" if replaced else ""))
  return 0


LABEL_VARIANT = 28  # characters of a point's departures shown beside its mixer


def accuracy_against_speed(summary: pd.DataFrame, fig: Figure | None = None) -> Figure:
  """Test accuracy (at the best val step) against training steps/s: one panel per task and
  preset (speeds compare only there), one colour per mixer in every panel, each point labelled
  with its mixer (its departures from the preset, and "(yours)" for a `source` of "yours"),
  no label over another (`place_labels`).

  Args:
    summary: rows of `lra.report.results.summarize`, optionally with a `source` column.
    fig: where to draw (a pyplot figure in a notebook); a new Figure by default.
  """
  groups = list(summary.dropna(subset=["steps_per_s", "test_accuracy"])
                .groupby(["task", "preset"], sort=True))
  if not groups:
    raise errors.BadValue("no complete run with a speed and a test accuracy to plot")
  columns = min(3, len(groups))
  rows = math.ceil(len(groups) / columns)
  fig = fig or Figure(dpi=DPI)
  fig.set_size_inches(5.2 * columns, 4.2 * rows)
  # Fixed margins for panels of a fixed size: labels are placed in pixels, so the axes must not
  # move afterwards (and a layout engine costs seconds per draw here).
  fig.set_layout_engine("none")
  fig.subplots_adjust(left=0.35 / columns / 1.5 + 0.02, right=0.98, bottom=0.45 / (4.2 * rows),
                      top=1 - 0.3 / (4.2 * rows), wspace=0.28, hspace=0.38)
  axes = np.asarray(fig.subplots(rows, columns, squeeze=False)).ravel()
  mixers = sorted(summary["mixer"].unique())
  colour = dict(zip(mixers, distinct_colours(len(mixers))))
  placed = []
  for ax, ((task, preset), group) in zip(axes, groups):
    texts = []
    for row in group.itertuples():
      ax.scatter(row.steps_per_s, 100 * row.test_accuracy, color=colour[row.mixer], s=28,
                 zorder=3)
      # The variant's departures from the preset (+key=value,...), and a config id if summarize
      # had to tell configs apart.
      variant = (row.variant[len(row.preset):] if row.variant.startswith(row.preset)
                 else f" ({row.variant})")
      # Keys without their section, and a long list cut: a label must fit its panel.
      variant = re.sub(r"(?<=[+,])[a-z_]+\.(?=[\w.]+=)", "", variant)
      variant = variant if len(variant) <= LABEL_VARIANT else variant[:LABEL_VARIANT - 1] + "…"
      config = row.label[row.label.index(" [config"):] if " [config" in row.label else ""
      yours = " (yours)" if getattr(row, "source", None) == "yours" else ""
      texts.append(f"{row.mixer}{variant}{config}{yours}")
    ax.set(xscale="log", title=f"{task}, preset {preset}", xlabel="training steps/s",
           ylabel="test accuracy (%)")
    ax.margins(x=0.3, y=0.25)
    # Plain numbers at 1, 2, 5 x 10^k: a narrow log range otherwise labels its minor ticks
    # in scientific notation, on top of each other.
    ax.xaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    low, high = ax.get_xlim()
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda value, _: f"{value:g}") if high < 4 * low
                                 else NullFormatter())  # a narrow range: label 3, 4, 6 too
    ax.grid(alpha=0.3)
    placed.append((ax, np.column_stack([group["steps_per_s"], 100 * group["test_accuracy"]]),
                   texts))
  for ax in axes[len(groups):]:
    ax.set_visible(False)
  for ax, xy, texts in placed:
    place_labels(ax, xy, texts)
  return fig


# Where a label may sit around its point at distance d, nearest first, as (x, y) of its lower-left
# corner given the point p and the label's size (w, h): right, above-right, below-right, left,
# above and below (centred, then starting or ending at the point), above-left, below-left.
_X = {"after": lambda p, d, w: p + d, "before": lambda p, d, w: p - d - w,
      "centred": lambda p, d, w: p - w / 2, "from": lambda p, d, w: p, "to": lambda p, d, w: p - w}
_Y = {"level": lambda p, d, h: p - h / 2, "above": lambda p, d, h: p + d,
      "below": lambda p, d, h: p - d - h}
_SPOTS = (("after", "level"), ("after", "above"), ("after", "below"), ("before", "level"),
          ("centred", "above"), ("centred", "below"), ("from", "above"), ("from", "below"),
          ("to", "above"), ("to", "below"), ("before", "above"), ("before", "below"))


def place_labels(ax: Axes, xy: np.ndarray, texts: Sequence[str], *, fontsize: float = 7,
                 rings: int = 40) -> list:
  """Annotates point i (data coordinates, xy[N, 2]) with texts[i] where it overlaps no other
  label and no marker; a label set away from its point gets a thin leader line.

  Labels are placed one after another, each at the first free spot of rings of growing distance
  around its point (on each ring: right, then above-right, below-right, left, above, below, ...)
  inside the axes; one that finds none takes the spot inside the axes that overlaps the fewest.
  Call it once the figure's layout is final: positions are worked out in pixels.
  """
  fig = ax.figure
  renderer = (fig.canvas if hasattr(fig.canvas, "get_renderer") else
              FigureCanvasAgg(fig)).get_renderer()
  px_per_pt = fig.dpi / 72
  points = ax.transData.transform(np.asarray(xy, float))
  drafts = [ax.annotate(t, xy=p, fontsize=fontsize) for t, p in zip(texts, xy)]
  size = np.array([[b.width, b.height] for b in (a.get_window_extent(renderer) for a in drafts)])
  for draft in drafts:
    draft.remove()
  frame = ax.get_window_extent(renderer)
  gap, radius = 3 * px_per_pt, 3.5 * px_per_pt  # label to its point; a marker's keep-out
  pad = np.array([3.0, 1.0]) * px_per_pt  # a visible space between labels, wider sideways
  step = 0.8 * size[:, 1].max() if len(size) else 1.0
  taken = np.zeros((0, 4))  # boxes already placed: x0, y0, x1, y1
  markers = np.hstack([points - radius, points + radius])
  corners = []
  for point, (w, h) in zip(points, size):
    distances = [gap + ring * step for ring in range(rings)]
    options = np.array([[_X[x](point[0], d, w), _Y[y](point[1], d, h)]
                        for d in distances for x, y in _SPOTS])
    boxes = np.hstack([options, options + (w, h)])
    inside = ((boxes[:, :2] >= (frame.x0, frame.y0)) &
              (boxes[:, 2:] <= (frame.x1, frame.y1))).all(1)
    clashes = _overlapping(boxes, np.vstack([taken, markers]), pad).sum(1)
    # The nearest free spot; else the one with the fewest clashes, inside the axes if any is.
    corner = options[np.lexsort((np.arange(len(options)), clashes, ~inside))[0]]
    corners.append(corner)
    taken = np.vstack([taken, [*corner, *(corner + (w, h))]])
  placed = []
  for text, p, point, corner, (w, h) in zip(texts, xy, points, corners, size):
    far = np.hypot(*np.maximum(np.maximum(corner - point, point - corner - (w, h)), 0)) > 2 * gap
    relpos = (0.0 if corner[0] >= point[0] else 1.0 if corner[0] + w <= point[0] else 0.5,
              0.0 if corner[1] >= point[1] else 1.0 if corner[1] + h <= point[1] else 0.5)
    annotation = ax.annotate(
        text, xy=p, xytext=tuple((corner - point) / px_per_pt), textcoords="offset points",
        fontsize=fontsize, annotation_clip=False,
        arrowprops=dict(arrowstyle="-", color="0.55", linewidth=0.6, shrinkA=0, shrinkB=2,
                        relpos=relpos) if far else None)
    annotation.set_in_layout(False)
    placed.append(annotation)
  return placed


def _overlapping(boxes: np.ndarray, others: np.ndarray, pad: np.ndarray) -> np.ndarray:
  """[len(boxes), len(others)] whether each box (x0, y0, x1, y1) comes within `pad` of each
  other box."""
  return ((boxes[:, None, :2] < others[None, :, 2:] + pad) &
          (others[None, :, :2] < boxes[:, None, 2:] + pad)).all(-1)
