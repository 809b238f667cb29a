"""`lra plot` draws the curves of the runs it is given into one PNG; the accuracy-against-speed
figure keeps its labels apart and its colours distinct; the notebooks' reader sees your runs."""
import itertools
import re
import shutil
import struct
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.text import Text

from lra import cli
from lra.report import plot, results
from lra.runs.writers import read_metrics

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "results" / "runs"
DEMO = [RUNS / "listops" / "latte" / "demo_seed0", RUNS / "listops" / "softmax" / "demo_seed0"]


def _png_size(path: Path) -> tuple[int, int]:
  data = path.read_bytes()
  assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
  return struct.unpack(">II", data[16:24])


def test_lra_plot_writes_one_png_with_every_runs_curves(tmp_path, capsys):
  out = tmp_path / "curves.png"
  assert cli.main(["plot", *map(str, DEMO), "-o", str(out)]) == 0
  assert capsys.readouterr().out.strip() == f"wrote {out} (2 runs)"
  fig = plot.curves_figure(DEMO)
  assert _png_size(out) == tuple(round(v) for v in fig.get_size_inches() * plot.DPI)
  lines = {line.get_gid(): line for ax in fig.axes for line in ax.get_lines() if line.get_gid()}
  for run in DEMO:
    rows = read_metrics(run / "metrics.jsonl")
    for key in ("val/accuracy", "test/accuracy", "train/loss", "val/loss"):
      steps = [r["step"] for r in rows if key in r]
      assert list(lines[f"{run}|{key}"].get_xdata()) == steps, (run.name, key)
  colours = {lines[f"{run}|val/accuracy"].get_color() for run in DEMO}
  assert len(colours) == 2
  legend = [t.get_text() for t in fig.legends[0].get_texts()]
  assert legend == ["latte", "softmax"]  # what tells them apart
  assert fig.texts[0].get_text() == "listops / demo_seed0"  # what they share


def test_globs_and_folders_of_runs_and_the_default_path(tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(tmp_path)
  assert cli.main(["plot", str(RUNS / "listops" / "latte" / "demo_seed*")]) == 0
  assert capsys.readouterr().out.strip() == (
      "wrote results/local/plots/listops_latte_demo_seed0+demo_seed1.png (2 runs)")
  assert _png_size(tmp_path / "results/local/plots/listops_latte_demo_seed0+demo_seed1.png")[0] == (
      12 * plot.DPI)
  found = plot.find_runs([RUNS / "listops" / "latte"])
  assert found == sorted(p.parent for p in (RUNS / "listops" / "latte").glob("*/final.json"))
  assert cli.main(["plot", str(tmp_path / "nothing")]) == 2
  assert "no such run folder" in capsys.readouterr().err


def test_runs_of_two_tasks_are_titled_with_them_warned_about_and_named_apart(
    tmp_path, monkeypatch, capsys):
  # `lra plot` of a ListOps and a Pathfinder run once titled its figure "2 runs", said nothing,
  # and wrote results/local/plots/curves.png, which the next such plot replaced in silence.
  monkeypatch.chdir(tmp_path)
  two_tasks = [RUNS / "listops" / "latte" / "demo_seed0", RUNS / "pathfinder" / "latte" /
               "laptop_seed0"]
  assert cli.main(["plot", *map(str, two_tasks)]) == 0
  out = "results/local/plots/listops+pathfinder_latte_demo_seed0+laptop_seed0.png"
  captured = capsys.readouterr()
  assert captured.out.strip() == f"wrote {out} (2 runs)"
  assert captured.err == ("lra plot: warning: runs of 2 tasks (listops, pathfinder) in one "
                          "figure: their steps and accuracies do not compare; one task per plot "
                          "reads better\n")
  title, labels = plot.run_labels(two_tasks)
  assert title == "listops + pathfinder: 2 runs / latte"
  assert labels == ["listops/demo_seed0", "pathfinder/laptop_seed0"]
  assert plot.curves_figure(two_tasks).texts[0].get_text() == title
  # Other runs go to another file; the same runs again replace theirs, and say so.
  assert plot.default_output(DEMO, Path("results/local")) != plot.default_output(
      two_tasks, Path("results/local"))
  assert cli.main(["plot", *map(str, two_tasks)]) == 0
  assert capsys.readouterr().out.strip() == (
      f"wrote {out} (2 runs); it replaced the file of that name")


def test_a_long_default_name_is_cut_and_ends_in_a_digest_of_the_runs():
  runs = sorted(p.parent for p in (RUNS / "listops").glob("*/*/final.json"))
  first, second = (plot.default_output(group, Path("r")) for group in (runs, runs[1:]))
  assert len(first.stem) <= plot.MAX_NAME and len(second.stem) <= plot.MAX_NAME
  assert first.stem.startswith("listops_") and first != second
  assert re.fullmatch(r".*_[0-9a-f]{8}", first.stem)


def test_labels_tell_apart_runs_that_share_a_name(tmp_path):
  copy = tmp_path / "results" / "runs" / "listops" / "latte" / "demo_seed0"
  shutil.copytree(DEMO[0], copy, ignore=shutil.ignore_patterns("checkpoints"))
  title, labels = plot.run_labels([DEMO[0], copy])
  assert title == "listops / latte / demo_seed0"
  assert len(set(labels)) == 2 and labels[1] == f"demo_seed0 ({tmp_path / 'results' / 'runs'})"


def test_distinct_colours_never_repeat():
  for n in range(1, 30):
    colours = plot.distinct_colours(n)
    assert len(colours) == n and len(set(colours)) == n


def _assert_apart(fig, ax):
  """No label over another, all inside the axes (the figure drawn already)."""
  renderer = fig.canvas.get_renderer()
  boxes = [Text.get_window_extent(t, renderer) for t in ax.texts]  # the text, not its leader
  frame = ax.get_window_extent(renderer)
  for a, b in itertools.combinations(boxes, 2):
    assert not a.overlaps(b)
  for box in boxes:
    assert frame.x0 - 0.5 <= box.x0 and box.x1 <= frame.x1 + 0.5
    assert frame.y0 - 0.5 <= box.y0 and box.y1 <= frame.y1 + 0.5


def test_labels_of_a_tight_cluster_are_moved_apart_with_leader_lines():
  fig = Figure(figsize=(5, 4), dpi=100)
  ax = fig.subplots()
  xy = np.column_stack([1 + 0.001 * np.arange(15), np.full(15, 35.0)])  # one spot, 15 labels
  ax.scatter(xy[:, 0], xy[:, 1])
  ax.set(xlim=(0.9, 1.2), ylim=(0, 70))
  annotations = plot.place_labels(ax, xy, [f"mixer_{i}" for i in range(15)])
  fig.canvas.draw()
  _assert_apart(fig, ax)
  assert sum(a.arrow_patch is not None for a in annotations) >= 10  # most had to move away


def test_accuracy_against_speed_one_colour_per_mixer_and_labels_apart():
  summary = results.summarize(results.load_runs(ROOT / "results", status="complete"))
  fig = plot.accuracy_against_speed(summary)
  fig.canvas.draw()
  colour_of = {}
  for ax in fig.axes:
    if not ax.get_visible():
      continue
    mixers = [re.split(r"[ +]", t.get_text())[0] for t in ax.texts]
    colours = [tuple(c.get_facecolor()[0]) for c in ax.collections]
    for mixer, colour in zip(mixers, colours):
      assert colour_of.setdefault(mixer, colour) == colour  # the same in every panel
    _assert_apart(fig, ax)
  assert len(set(colour_of.values())) == len(colour_of) == summary["mixer"].nunique()


def test_your_runs_are_read_beside_the_committed_ones(tmp_path):
  mine = tmp_path / "results" / "local" / "runs" / "listops" / "latte" / "demo_seed0"
  shutil.copytree(DEMO[0], mine, ignore=shutil.ignore_patterns("checkpoints"))
  shutil.copytree(DEMO[1], tmp_path / "results" / "runs" / "listops" / "softmax" / "demo_seed0",
                  ignore=shutil.ignore_patterns("checkpoints"))
  runs = results.load_runs_with_local(tmp_path / "results", status="complete")
  assert list(zip(runs["source"], runs["mixer"])) == [("committed", "softmax"),
                                                      ("yours", "latte")]
  curves = results.load_all_curves(runs, tmp_path / "results")
  assert set(curves["source"]) == {"committed", "yours"}
  assert len(curves[curves["source"] == "yours"]) == len(results.load_curves(mine))


def test_a_curve_under_another_still_shows_and_says_so(tmp_path):
  """Two runs with the very same curves (a copy, or two commands of one run): each its own
  marker, and the later one's label names the run it lies under."""
  copy = tmp_path / "runs" / "listops" / "latte" / "demo_seed9"
  shutil.copytree(DEMO[0], copy, ignore=shutil.ignore_patterns("checkpoints", "*.pack*"))
  fig = plot.curves_figure([DEMO[0], copy])
  lines = {line.get_gid(): line for ax in fig.axes for line in ax.get_lines() if line.get_gid()}
  markers = {lines[f"{run}|val/accuracy"].get_marker() for run in (DEMO[0], copy)}
  assert len(markers) == 2
  legend = [t.get_text() for t in fig.legends[0].get_texts()]
  assert legend[1].endswith(f"(same curves as {legend[0]})"), legend
