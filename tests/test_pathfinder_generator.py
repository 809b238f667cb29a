"""Pathfinder generator: release layout, determinism, resume, balance, marker and dash geometry."""
from __future__ import annotations

import dataclasses
import io
import json
import math

import numpy as np
import pytest
from PIL import Image

from lra.tasks.generators.pathfinder import generate as pg
from lra.tasks.generators.pathfinder import geometry, stats
from lra.tasks.generators.pathfinder.params import DIFFICULTIES, get_params
from lra.tasks.generators.pathfinder.render import encode_png, render


def _files(root):
  return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
          if p.is_file()}


def _naive_segment_distance(a, b, c, d) -> float:
  """Distance between segments ab and cd in the plane, by brute force over parameters."""
  def point_segment(p, s, e):
    se, sp = e - s, p - s
    t = min(max(float(np.dot(sp, se) / np.dot(se, se)), 0.0), 1.0)
    return float(np.linalg.norm(p - (s + t * se)))

  def cross(o, p, q):
    return (p[0] - o[0]) * (q[1] - o[1]) - (p[1] - o[1]) * (q[0] - o[0])

  if (cross(a, b, c) * cross(a, b, d) < 0) and (cross(c, d, a) * cross(c, d, b) < 0):
    return 0.0  # proper crossing
  return min(point_segment(a, c, d), point_segment(b, c, d), point_segment(c, a, b),
             point_segment(d, a, b))


def test_parameter_table_matches_data_md():
  # DATA.md, hard row: paddle_length, thickness, margin, seed_distance, marker_radius,
  # continuity, distractors; frame 1 px (22 at 256).
  expected = {32: (2, 0.5, 1, 7, 1.5, 1.0, 5, 1), 64: (5, 1.0, 1, 12, 2.5, 1.8, 5, 1),
              128: (5, 1.5, 2, 20, 3.0, 1.8, 8, 1), 256: (5, 2.0, 3, 27, 5.0, 1.8, 7, 22)}
  for res, row in expected.items():
    p = get_params(res, "hard")
    assert (p.paddle_length, p.paddle_thickness, p.margin, p.seed_distance, p.marker_radius,
            p.continuity, p.num_distractors, p.frame) == row
  assert get_params(32, "hard").snake_contrast * get_params(32, "hard").paddle_contrast == 1.5
  for difficulty, (folder, length) in DIFFICULTIES.items():
    p = get_params(32, difficulty)
    assert (p.folder, p.contour_length, p.distractor_length) == (folder, length, length // 3)
  with pytest.raises(ValueError, match="32, 64, 128, 256"):
    get_params(48, "hard")
  with pytest.raises(ValueError, match="easy"):
    get_params(32, "medium")


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
        assert image.mode == "L" and image.size == (32, 32)
        assert np.asarray(image).max() == 255  # the markers are at full intensity
    assert len(list((curv / "imgs" / str(batch)).iterdir())) == size


def test_same_seed_same_bytes_for_any_worker_count(tmp_path):
  kwargs = dict(resolution=32, difficulty="easy", num_images=24, seed=7, progress=False,
                images_per_batch=8)
  one = pg.generate(tmp_path / "one", workers=1, **kwargs)
  two = pg.generate(tmp_path / "two", workers=2, **kwargs)
  assert _files(one) == _files(two)
  other = pg.generate(tmp_path / "other", workers=1, **{**kwargs, "seed": 8})
  assert _files(other)["imgs/0/sample_0.png"] != _files(one)["imgs/0/sample_0.png"]


def test_resume_skips_finished_batches_and_refuses_other_settings(tmp_path):
  kwargs = dict(resolution=32, difficulty="easy", num_images=20, seed=3, progress=False,
                images_per_batch=10)
  curv = pg.generate(tmp_path, **kwargs)
  before = _files(curv)
  (curv / "imgs" / "0" / "sample_0.png").write_bytes(b"finished batches are not redone")
  (curv / "metadata" / "1.npy").unlink()  # batch 1 was interrupted
  (curv / "imgs" / "1" / "sample_3.png").unlink()
  pg.generate(tmp_path, **kwargs)
  after = _files(curv)
  assert after["imgs/0/sample_0.png"] == b"finished batches are not redone"
  del before["imgs/0/sample_0.png"], after["imgs/0/sample_0.png"]
  assert after == before
  with pytest.raises(ValueError, match="--seed 3"):
    pg.generate(tmp_path, **{**kwargs, "seed": 4})


def test_labels_balanced_per_batch(tmp_path):
  curv = pg.generate(tmp_path, 32, "easy", num_images=21, seed=0, progress=False,
                     images_per_batch=7)
  for path in (curv / "metadata").iterdir():
    labels = [int(row[3]) for row in stats.read_metadata(path)]
    assert abs(sum(labels) - len(labels) / 2) <= 0.5


@pytest.mark.parametrize("resolution,difficulty,count", [(32, "hard", 25), (32, "easy", 10),
                                                         (128, "hard", 4)])
def test_dashes_never_touch_other_snakes(resolution, difficulty, count):
  p = get_params(resolution, difficulty)
  t = geometry.tables(p)
  rng = np.random.default_rng(0)
  limit = 2 * geometry.footprint_radius(p) - math.sqrt(2)
  lo, hi = t.pad + p.frame * t.scale, t.pad + (resolution - p.frame) * t.scale
  for i in range(count):
    scene = geometry.make_scene(p, rng, i % 2)
    start, end = geometry.paddle_ends(p, t, scene.centre, scene.angle)
    assert len(set(scene.snake[scene.snake >= 2])) <= p.num_distractors
    assert np.all((start >= lo) & (start < hi) & (end >= lo) & (end < hi))
    for snake in np.unique(scene.snake):
      want = p.contour_length if snake < 2 else p.distractor_length
      assert np.sum(scene.snake == snake) == want
    for a in range(len(start)):
      for b in range(a + 1, len(start)):
        consecutive = scene.snake[a] == scene.snake[b] and b == a + 1
        distance = _naive_segment_distance(start[a], end[a], start[b], end[b])
        if consecutive:  # the gap between dashes: about 2 margins, never a join
          gap = np.linalg.norm(start[b] - end[a])
          assert 0 < gap <= 2 * p.margin * t.scale + 1
        else:
          assert distance > limit, (i, a, b, distance)


def test_markers_sit_on_lit_target_ends():
  p = get_params(32, "hard")
  t = geometry.tables(p)
  rng = np.random.default_rng(1)
  for i in range(20):
    label = i % 2
    scene = geometry.make_scene(p, rng, label)
    start, end = geometry.paddle_ends(p, t, scene.centre, scene.angle)
    snake = scene.snake

    def owner(point, ends, pick):
      for s in (0, 1):
        idx = np.flatnonzero(snake == s)[pick]
        if np.allclose(ends[idx], point):
          return s, idx
      raise AssertionError(f"marker {point} is on no target end")

    s0, first = owner(scene.markers[0], start, 0)   # a target's first dash starts there
    s1, last = owner(scene.markers[1], end, -1)      # a target's last dash ends there
    assert (s0 == s1) == bool(label)
    image = render(p, scene).astype(int)
    bare = render(p, dataclasses.replace(scene, markers=np.zeros((0, 2)))).astype(int)
    for point in scene.markers:
      y, x = np.rint(geometry.to_pixels(p, t, point)).astype(int)
      assert image[y, x] >= 200
    for idx in (first, last):  # the dashes under the markers are drawn
      mid = geometry.to_pixels(p, t, (start[idx] + end[idx]) / 2)
      y, x = np.rint(mid).astype(int)
      assert bare[max(y - 1, 0):y + 2, max(x - 1, 0):x + 2].max() > 60


def test_single_dash_ink_matches_its_area():
  # A lone horizontal dash: total intensity ~ length * thickness * contrast (no markers).
  p = get_params(128, "hard")
  t = geometry.tables(p)
  angle = 0  # unit (0, 1): along x
  centre = (t.pad + 60 * t.scale) * t.width + t.pad + 60 * t.scale
  scene = geometry.Scene(centre=np.array([centre]), angle=np.array([angle]),
                         snake=np.array([0]), origin=np.zeros((2, 2)), terminal=np.zeros((2, 2)),
                         markers=np.zeros((0, 2)), label=1)
  image = render(p, scene)
  ink = image.sum() / 255
  expected = p.paddle_length * p.paddle_thickness * p.snake_contrast * p.paddle_contrast
  assert expected * 0.85 < ink < expected * 1.25
  rows = np.flatnonzero(image.sum(axis=1))
  cols = np.flatnonzero(image.sum(axis=0))
  assert len(cols) <= p.paddle_length + 2 and len(rows) <= math.ceil(p.paddle_thickness) + 2


def test_png_round_trip():
  rng = np.random.default_rng(0)
  image = rng.integers(0, 256, size=(17, 23), dtype=np.uint8)
  with Image.open(io.BytesIO(encode_png(image))) as decoded:
    assert decoded.mode == "L"
    np.testing.assert_array_equal(np.asarray(decoded), image)


def test_best_threshold_accuracy_matches_brute_force():
  rng = np.random.default_rng(0)
  for _ in range(20):
    values = rng.integers(0, 6, size=30).astype(float)
    labels = rng.integers(0, 2, size=30)
    best = 0.0
    for threshold in np.concatenate([[-1.0], np.unique(values)]):
      predicted = values > threshold
      accuracy = np.mean(predicted == labels)
      best = max(best, accuracy, 1 - accuracy)
    assert stats.best_threshold_accuracy(values, labels) == pytest.approx(best)


def test_stats_report(tmp_path):
  curv = pg.generate(tmp_path, 32, "easy", num_images=40, seed=2, stats=True, progress=False,
                     images_per_batch=20)
  report = json.loads((curv / pg.STATS_FILE).read_text())
  assert report == json.loads(json.dumps(stats.compute_stats(curv)))
  assert report["num_images"] == 40 and report["num_label_0"] == report["num_label_1"] == 20
  assert sum(report["histogram_16_bins"]) == pytest.approx(1.0)
  assert 0 < report["bright_fraction"] < report["lit_fraction"] < 1
  assert 0.5 <= report["marker_distance_best_threshold_accuracy"] <= 1
  # The sidecar distances are the marker centres' distances, in pixels.
  markers = np.load(curv / stats.MARKERS_DIR / "0.npy")
  assert markers.shape == (20, 4)
  with Image.open(curv / "imgs" / "0" / "sample_0.png") as image:
    pixels = np.asarray(image)
  for y, x in markers[0].reshape(2, 2):
    assert pixels[int(round(y)), int(round(x))] >= 200


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
  for fields in stats.read_metadata(curv / "metadata" / "0.npy"):
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
