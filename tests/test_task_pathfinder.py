"""Pathfinder and Path-X: release layout, PNG pixels against the arrays written, split, skips."""
import json
import os

import numpy as np
import pytest
from PIL import Image

from lra.tasks import TASKS
from lra.tasks.sources import pathfinder, pathx
from lra.tasks.contract.batches import make_batch
from lra.tasks.contract.cache import PreparedData
from lra.tasks.contract.row_writer import RowWriter


def _write_set(folder, side, batches=3, per_batch=12, seed=0, broken=None):
  """A release-style difficulty folder; returns {"imgs/<b>/sample_<k>.png": (pixels, label)}.

  broken maps (batch, k) to "empty" | "garbage" | "truncated" | "missing".
  """
  rng = np.random.default_rng(seed)
  broken = broken or {}
  written = {}
  (folder / "metadata").mkdir(parents=True)
  for b in range(batches):
    (folder / "imgs" / str(b)).mkdir(parents=True)
    lines = []
    for k in range(per_batch):
      label = int(rng.integers(0, 2))
      name = f"imgs/{b}/sample_{k}.png"
      pixels = rng.integers(0, 256, size=(side, side), dtype=np.uint8)
      kind = broken.get((b, k))
      if kind == "empty":
        (folder / name).write_bytes(b"")
      elif kind == "garbage":
        (folder / name).write_bytes(b"\x89PNG not really")
      elif kind == "truncated":
        Image.fromarray(pixels, mode="L").save(folder / name)
        (folder / name).write_bytes((folder / name).read_bytes()[:-40])
      elif kind is None:
        Image.fromarray(pixels, mode="L").save(folder / name)
        written[name] = (pixels, label)
      lines.append(f"imgs/{b} sample_{k}.png {k} {label} 1.8 14 4 5 1.5 2 1")
    (folder / "metadata" / f"{b}.npy").write_text("\n".join(lines) + "\n")
  return written


def test_original_generators_binary_metadata(tmp_path):
  # snakes.save_metadata: np.save of an [N, 11] string array (str under Python 3, bytes under
  # Python 2), instead of the release's text lines.
  folder = tmp_path / "pathfinder32" / "curv_contour_length_14"
  written = _write_set(folder, 32, batches=2, per_batch=7)
  for b, dtype in ((0, str), (1, bytes)):
    path = folder / "metadata" / f"{b}.npy"
    rows = [line.split(" ") for line in path.read_text().splitlines()]
    with open(path, "wb") as f:
      np.save(f, np.array(rows).astype(dtype))
  meta = pathfinder.prepare(tmp_path, tmp_path / "cache")
  data = PreparedData(tmp_path / "cache")
  everything = sorted(_rows(data, "train") + _rows(data, "val") + _rows(data, "test"))
  assert everything == sorted((p.tobytes(), label) for p, label in written.values())
  assert meta["num_listed"] == 14
  with open(folder / "metadata" / "1.npy", "wb") as f:
    np.save(f, np.array([["imgs/1", "sample_0.png", 0]], dtype=object), allow_pickle=True)
  with pytest.raises(ValueError, match=r"1\.npy: expected np.save of an \[N, 11\] string array"):
    pathfinder.prepare(tmp_path, tmp_path / "cache2")
  with open(folder / "metadata" / "1.npy", "wb") as f:
    np.save(f, np.array([["imgs/1", "sample_0.png", "0", "7"]]))
  with pytest.raises(ValueError,
                     match=r"1\.npy:1: expected 'imgs/<batch> sample_<k>.png <k> <label"):
    pathfinder.prepare(tmp_path, tmp_path / "cache3")


def _rows(data, split):
  arrays = data.split(split)
  return [(bytes(x), int(y)) for x, y in zip(np.asarray(arrays["inputs"]), arrays["label"])]


def test_pixels_labels_split_and_skips(tmp_path):
  folder = tmp_path / "lra_release" / "lra_release" / "pathfinder32" / "curv_contour_length_14"
  broken = {(0, 5): "empty", (1, 2): "garbage", (2, 7): "missing", (2, 9): "truncated"}
  written = _write_set(folder, 32, broken=broken)
  meta = pathfinder.prepare(tmp_path, tmp_path / "cache", split_seed=5)
  data = PreparedData(tmp_path / "cache")

  # Every readable image lands in exactly one split with its own pixels and label.
  everything = sorted(_rows(data, "train") + _rows(data, "val") + _rows(data, "test"))
  assert everything == sorted((p.tobytes(), label) for p, label in written.values())
  assert meta["num_listed"] == 36
  assert meta["num_skipped"] == {"empty": 1, "unreadable": 2, "missing": 1}
  assert sorted(meta["skipped_examples"]) == ["imgs/0/sample_5.png: empty",
                                              "imgs/1/sample_2.png: unreadable",
                                              "imgs/2/sample_7.png: missing",
                                              "imgs/2/sample_9.png: unreadable"]
  # The split is drawn over all 36 listed images (30/3/3); a skipped image leaves its split.
  assign = pathfinder.split_assignment(36, 5)
  assert np.bincount(assign).tolist() == [30, 3, 3]
  listed = [f"imgs/{b}/sample_{k}.png" for b in range(3) for k in range(12)]
  for s, split in enumerate(("train", "val", "test")):
    names = [n for n, a in zip(listed, assign) if a == s and n in written]
    assert _rows(data, split) == [(written[n][0].tobytes(), written[n][1]) for n in names]
    assert meta["splits"][split] == len(names)
  assert (meta["seq_len"], meta["vocab_size"], meta["pad_id"], meta["split_seed"]) == (
      1024, 256, None, 5)
  assert meta["difficulty"] == "hard" and meta["options"] == {"difficulty": "hard",
                                                              "split_seed": 5}
  batch = make_batch(data.split("train"), np.arange(4), data.spec)
  assert batch["mask"].all() and batch["inputs"].shape == (4, 1024)
  assert not list((tmp_path / "cache").glob("*.oversize"))
  assert TASKS["pathfinder"] is pathfinder.TASK and TASKS["pathx"] is pathx.TASK


def test_seed_changes_the_split_not_the_content(tmp_path):
  _write_set(tmp_path / "pathfinder32" / "curv_contour_length_14", 32)
  pathfinder.prepare(tmp_path / "pathfinder32", tmp_path / "a", split_seed=0)
  pathfinder.prepare(tmp_path / "pathfinder32", tmp_path / "b", split_seed=1)
  a, b = PreparedData(tmp_path / "a"), PreparedData(tmp_path / "b")
  assert _rows(a, "test") != _rows(b, "test")
  union = lambda d: sorted(_rows(d, "train") + _rows(d, "val") + _rows(d, "test"))
  assert union(a) == union(b)


def test_difficulty_picks_its_folder(tmp_path):
  easy = _write_set(tmp_path / "pathfinder32" / "curv_baseline", 32, seed=1, batches=2)
  _write_set(tmp_path / "pathfinder32" / "curv_contour_length_14", 32, seed=2, batches=2)
  meta = pathfinder.prepare(tmp_path, tmp_path / "cache", difficulty="easy")
  data = PreparedData(tmp_path / "cache")
  got = sorted(_rows(data, "train") + _rows(data, "val") + _rows(data, "test"))
  assert got == sorted((p.tobytes(), y) for p, y in easy.values())
  assert meta["source"]["path"].endswith("curv_baseline")
  with pytest.raises(FileNotFoundError, match=r"pathfinder32/curv_contour_length_9"):
    pathfinder.prepare(tmp_path, tmp_path / "cache", difficulty="intermediate")
  with pytest.raises(ValueError, match="Valid: easy, intermediate, hard"):
    pathfinder.prepare(tmp_path, tmp_path / "cache", difficulty="medium")


def test_difficulty_folder_itself_is_a_source(tmp_path):
  folder = tmp_path / "x" / "curv_contour_length_14"
  _write_set(folder, 32, batches=1)
  assert sum(pathfinder.prepare(folder, tmp_path / "cache")["splits"].values()) == 12


def test_errors_name_file_line_and_size(tmp_path):
  folder = tmp_path / "pathfinder32" / "curv_contour_length_14"
  _write_set(folder, 32, batches=2)
  (folder / "metadata" / "1.npy").write_text("imgs/1 sample_0.png 0 1 1.8\nimgs/1 sample_1.png 1\n")
  with pytest.raises(ValueError, match=r"metadata/1\.npy:2: expected 'imgs/<batch>"):
    pathfinder.prepare(tmp_path, tmp_path / "cache")
  wrong = tmp_path / "wrong" / "pathfinder128" / "curv_contour_length_14"
  _write_set(wrong, 32, batches=1)
  with pytest.raises(ValueError, match=r"sample_0\.png: expected a 128x128 image, found 32x32"):
    pathx.prepare(tmp_path / "wrong", tmp_path / "cache")
  with pytest.raises(FileNotFoundError, match=r"pathfinder128/curv_contour_length_14.*Looked at"):
    pathx.prepare(tmp_path, tmp_path / "cache")


def test_pathx_with_worker_processes(tmp_path):
  folder = tmp_path / "pathfinder128" / "curv_contour_length_14"
  written = _write_set(folder, 128, batches=2, per_batch=11, broken={(1, 4): "empty"})
  meta = pathx.prepare(tmp_path, tmp_path / "cache", workers="2", split_seed=3)
  data = PreparedData(tmp_path / "cache")
  assert meta["seq_len"] == 16384 and data.split("train")["inputs"].dtype == np.uint8
  listed = [f"imgs/{b}/sample_{k}.png" for b in range(2) for k in range(11)]
  assign = pathfinder.split_assignment(22, 3)
  for s, split in enumerate(("train", "val", "test")):
    names = [n for n, a in zip(listed, assign) if a == s and n in written]
    assert _rows(data, split) == [(written[n][0].tobytes(), written[n][1]) for n in names]
  assert meta["num_skipped"] == {"empty": 1}
  assert pathx.TASK.decode(data.split("val")["inputs"][0]).startswith("[128x128 pixels, max-pooled")


def test_idempotent_and_image_change_detected(tmp_path, capsys):
  folder = tmp_path / "pathfinder32" / "curv_contour_length_14"
  _write_set(folder, 32, batches=1)
  pathfinder.prepare(tmp_path, tmp_path / "cache")
  capsys.readouterr()
  pathfinder.prepare(tmp_path, tmp_path / "cache", workers=3)  # workers do not change the output
  assert "up to date" in capsys.readouterr().out
  pathfinder.prepare(tmp_path, tmp_path / "cache", split_seed=9)
  assert "up to date" not in capsys.readouterr().out
  Image.fromarray(np.full((32, 32), 7, np.uint8), mode="L").save(folder / "imgs/0/sample_3.png")
  os.utime(folder / "imgs/0/sample_3.png", ns=(5, 5))
  pathfinder.prepare(tmp_path, tmp_path / "cache", split_seed=9)
  assert "up to date" not in capsys.readouterr().out
  rows = sum((_rows(PreparedData(tmp_path / "cache"), s) for s in ("train", "val", "test")), [])
  assert bytes([7] * 1024) in [r[0] for r in rows]


def test_row_writer_shrinks_to_what_was_written(tmp_path):
  rows = np.arange(7 * 5, dtype=np.uint16).reshape(7, 5)
  writer = RowWriter(tmp_path / "train.npy", capacity=10, width=5, dtype=np.uint16)
  writer.append(rows[:3])
  writer.append(rows[3:3])
  writer.append(rows[3:])
  assert writer.close() == 7
  empty = RowWriter(tmp_path / "val.npy", capacity=4, width=5, dtype=np.uint16)
  assert empty.close() == 0
  np.testing.assert_array_equal(np.load(tmp_path / "train.npy"), rows)
  assert np.load(tmp_path / "val.npy").shape == (0, 5)
  assert sorted(p.name for p in tmp_path.iterdir()) == ["train.npy", "val.npy"]
  with pytest.raises(ValueError, match="more than the 1 rows"):
    RowWriter(tmp_path / "test.npy", capacity=1, width=5, dtype=np.uint16).append(rows[:2])


def _smoke(tmp_path, task, side, capsys):
  from lra.cli import main
  written = _write_set(tmp_path / "release" / f"pathfinder{side}" / "curv_contour_length_9", side,
                       batches=1, per_batch=20)
  data = tmp_path / "data"
  assert main(["data", "prepare", task, "--source", str(tmp_path / "release"), "--data-dir",
               str(data), "--option", "difficulty=intermediate", "--option", "split_seed=2"]) == 0
  capsys.readouterr()
  assert main(["data", "inspect", task, "--split", "train", "--index", "0", "--json",
               "--data-dir", str(data)]) == 0
  record = json.loads(capsys.readouterr().out)
  assert (bytes(record["tokens"]), record["label"]) in [
      (p.tobytes(), y) for p, y in written.values()]
  run_dir = tmp_path / "run"
  # The smoke preset would generate its own set; point it at the copy prepared above.
  assert main(["run", task, "softmax", "--preset", "smoke", "--data-dir", str(data),
               "--run-dir", str(run_dir), "--quiet", f"--config.data.cache_name={task}",
               "--config.data.generate=False", "--config.train.num_steps=2"]) == 0
  final = json.loads((run_dir / "final.json").read_text())
  assert final["status"] == "complete" and final["step"] == 2
  assert final["seq_len"] == side * side
  assert final["data"]["options"] == {"difficulty": "intermediate", "split_seed": 2}


def test_cli_smoke_run_pathfinder(tmp_path, capsys):
  _smoke(tmp_path, "pathfinder", 32, capsys)


@pytest.mark.slow
def test_cli_smoke_run_pathx(tmp_path, capsys):
  """Softmax attention over 16,384 tokens: ~6 GB and minutes on a CPU, hence slow."""
  _smoke(tmp_path, "pathx", 128, capsys)


@pytest.mark.parametrize("overrides, folder, side", [
    (["--config.data.generator.difficulty=easy"], "curv_baseline", 32),
    (["--config.data.generator.difficulty=intermediate"], "curv_contour_length_9", 32),
    (["--config.data.generator.difficulty=hard"], "curv_contour_length_14", 32),
    (["--config.data.generator.resolution=64", "--config.data.generator.difficulty=easy"],
     "curv_baseline", 64),
])
def test_generator_settings_reach_the_preparation(tmp_path, overrides, folder, side):
  """A run that makes its own data prepares what its generator wrote: the difficulty's folder
  and the resolution's length (a reader left at its defaults looked for the 32x32 hard set)."""
  from lra.cli import main
  data, run_dir = tmp_path / "data", tmp_path / "run"
  assert main(["run", "pathfinder", "latte", "--preset", "smoke", "--data-dir", str(data),
               "--run-dir", str(run_dir), "--quiet", "--config.train.num_steps=1",
               "--config.data.generator.num_images=40", *overrides]) == 0
  final = json.loads((run_dir / "final.json").read_text())
  assert final["status"] == "complete" and final["seq_len"] == side * side
  assert final["data"]["options"]["difficulty"] == {
      "curv_baseline": "easy", "curv_contour_length_9": "intermediate",
      "curv_contour_length_14": "hard"}[folder]
  assert folder in final["data"]["source"]["path"] and f"pathfinder{side}" in (
      final["data"]["source"]["path"])
