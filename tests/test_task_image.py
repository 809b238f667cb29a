"""Image (grayscale CIFAR-10): pickles, archive and TFDS sources; pixels against a plain loop."""
import json
import os
import pickle
import sys
import tarfile
import types

import numpy as np
import pytest

from lra.tasks import TASKS
from lra.tasks.sources import image
from lra.tasks.contract.batches import make_batch
from lra.tasks.contract.cache import PreparedData


def _fake_cifar(folder, per_batch=8, test_size=6, seed=0):
  """The cifar-10-batches-py layout with random images; returns {split: (data[N,3072], labels)}."""
  rng = np.random.default_rng(seed)
  folder.mkdir(parents=True)
  out = {"train": ([], []), "test": ([], [])}
  names = [(f"data_batch_{i}", "train", per_batch) for i in range(1, 6)]
  for name, split, n in names + [("test_batch", "test", test_size)]:
    data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
    if name == "data_batch_1":
      data[0] = 0  # an all-black image: still all real tokens
    labels = [int(v) for v in rng.integers(0, 10, size=n)]
    batch = {b"batch_label": name.encode(), b"labels": labels, b"data": data,
             b"filenames": [f"img_{k}.png".encode() for k in range(n)]}
    blob = pickle.dumps(batch, protocol=2)
    # The real pickles were written under numpy 1 (numpy.core); numpy 2 writes numpy._core.
    blob = blob.replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")
    (folder / name).write_bytes(blob)
    out[split][0].append(data)
    out[split][1].extend(labels)
  return {k: (np.concatenate(v[0]), np.array(v[1])) for k, v in out.items()}


def _gray_by_loop(data):
  """Per pixel, from the channel-major rows: float32 as tf.image.rgb_to_grayscale computes it."""
  f = np.float32
  out = np.zeros((len(data), 1024), dtype=np.int64)
  for i, row in enumerate(data):
    for p in range(1024):
      r, g, b = (f(int(row[c * 1024 + p])) * f(1 / 255) for c in range(3))
      out[i, p] = int((r * f(0.2989) + g * f(0.5870) + b * f(0.1140)) * f(255.5))
  return out


def test_pickles_tokens_split_and_meta(tmp_path):
  raw = _fake_cifar(tmp_path / "cifar-10-batches-py")
  meta = image.prepare(tmp_path / "cifar-10-batches-py", tmp_path / "cache")
  data = PreparedData(tmp_path / "cache")
  train_data, train_labels = raw["train"]
  expected = {"train": (train_data[:36], train_labels[:36]),
              "val": (train_data[36:], train_labels[36:]), "test": raw["test"]}
  for split, (rgb, labels) in expected.items():
    arrays = data.split(split)
    assert arrays["inputs"].dtype == np.uint8
    np.testing.assert_array_equal(arrays["inputs"], _gray_by_loop(rgb))
    np.testing.assert_array_equal(arrays["label"], labels)
  assert meta["splits"] == {"train": 36, "val": 4, "test": 6}
  assert (meta["vocab_size"], meta["seq_len"], meta["num_classes"]) == (256, 1024, 10)
  assert meta["pad_id"] is None and data.spec.pad_id is None
  assert sorted(meta["source"]["checksums"]) == sorted(
      [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"])
  batch = make_batch(data.split("train"), np.array([0, 1]), data.spec)
  assert (batch["inputs"][0] == 0).all() and batch["mask"].all()  # black is not padding
  assert TASKS["image"] is image.TASK


def test_grayscale_convention_on_known_colours():
  """TensorFlow's x255.5-then-truncate: pure green is 149 where rounding would give 150."""
  colours = np.array([[0, 0, 0], [255, 255, 255], [255, 0, 0], [0, 255, 0], [0, 0, 255],
                      [128, 128, 128]], dtype=np.uint8)
  tokens = image.to_grayscale(colours.reshape(6, 1, 1, 3))
  assert tokens.ravel().tolist() == [0, 255, 76, 149, 29, 128]


def test_archive_and_nesting_match_folder(tmp_path):
  _fake_cifar(tmp_path / "raw" / "cifar-10-batches-py")
  nested = tmp_path / "lra_release" / "lra_release"
  nested.mkdir(parents=True)
  with tarfile.open(nested / "cifar-10-python.tar.gz", "w:gz") as tar:
    tar.add(tmp_path / "raw" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
  meta = image.prepare(tmp_path, tmp_path / "from_tar")
  assert meta["source"]["format"] == "cifar-10-python.tar.gz"
  image.prepare(tmp_path / "raw", tmp_path / "from_folder")
  a, b = PreparedData(tmp_path / "from_tar"), PreparedData(tmp_path / "from_folder")
  for split in ("train", "val", "test"):
    for key in ("inputs", "label"):
      np.testing.assert_array_equal(a.split(split)[key], b.split(split)[key])


def test_bad_sources_are_named(tmp_path):
  raw = tmp_path / "cifar-10-batches-py"
  _fake_cifar(raw)
  os.remove(raw / "data_batch_3")
  with pytest.raises(FileNotFoundError, match="lacks data_batch_3"):
    image.prepare(raw, tmp_path / "cache")
  (raw / "data_batch_3").write_bytes(pickle.dumps({b"data": np.zeros((2, 5), np.uint8),
                                                   b"labels": [0, 1]}))
  with pytest.raises(ValueError, match=r"data_batch_3: expected b'data' uint8 \[N, 3072\]"):
    image.prepare(raw, tmp_path / "cache")
  (raw / "data_batch_3").write_bytes(pickle.dumps(types.SimpleNamespace(data=1)))
  with pytest.raises(ValueError, match=r"data_batch_3: not a CIFAR-10 python batch .*refusing"):
    image.prepare(raw, tmp_path / "cache")
  (tmp_path / "nothing").mkdir()
  with pytest.raises(FileNotFoundError, match=r"cifar-10-batches-py/.*cifar-10-python\.tar\.gz"):
    image.prepare(tmp_path / "nothing", tmp_path / "cache")


def test_idempotent(tmp_path, capsys):
  _fake_cifar(tmp_path / "cifar-10-batches-py")
  image.prepare(tmp_path, tmp_path / "cache")
  capsys.readouterr()
  image.prepare(tmp_path, tmp_path / "cache")
  assert "up to date" in capsys.readouterr().out
  with open(tmp_path / "cifar-10-batches-py" / "test_batch", "ab") as f:
    f.write(b"\n")  # trailing bytes after the pickle: content changed, still loadable
  image.prepare(tmp_path, tmp_path / "cache")
  assert "up to date" not in capsys.readouterr().out


def test_tfds_dir_read_through_the_tfds_api(tmp_path, monkeypatch):
  """TFDS needs TensorFlow to read records, so a stand-in module serves HWC images."""
  raw = _fake_cifar(tmp_path / "unused")

  def builder(name, data_dir):
    assert name == "cifar10"
    def as_dataset(split, shuffle_files):
      rgb, labels = raw[split]
      hwc = rgb.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
      return [{"image": im, "label": np.int64(y), "id": b"x"} for im, y in zip(hwc, labels)]
    return types.SimpleNamespace(as_dataset=as_dataset)

  monkeypatch.setitem(sys.modules, "tensorflow_datasets",
                      types.SimpleNamespace(builder=builder, as_numpy=iter))
  version = tmp_path / "tfds" / "cifar10" / "3.0.2"
  version.mkdir(parents=True)
  (version / "dataset_info.json").write_text("{}")
  meta = image.prepare(tmp_path / "tfds", tmp_path / "cache")
  assert meta["source"]["format"] == "tfds cifar10"
  test = PreparedData(tmp_path / "cache").split("test")
  np.testing.assert_array_equal(test["inputs"], _gray_by_loop(raw["test"][0]))
  monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)
  (version / "more.tfrecord").write_bytes(b"changed")
  with pytest.raises(ImportError, match=r"pip install -e \.\[tfds\]"):
    image.prepare(tmp_path / "tfds", tmp_path / "cache")


def test_decode_draws_the_image():
  tokens = np.zeros(1024, dtype=np.uint8)
  tokens[:32] = 255
  lines = image.TASK.decode(tokens).splitlines()
  assert lines[0].startswith("[32x32") and lines[1] == "@" * 32 and lines[2] == " " * 32


def test_cli_smoke_run(tmp_path, capsys):
  """`lra data prepare image` then `lra run image softmax --preset smoke` on a tiny copy."""
  from lra.cli import main
  raw = _fake_cifar(tmp_path / "cifar-10-batches-py", per_batch=2, test_size=4)
  data = tmp_path / "data"
  assert main(["data", "prepare", "image", "--source", str(tmp_path), "--data-dir",
               str(data)]) == 0
  capsys.readouterr()
  assert main(["data", "inspect", "image", "--split", "test", "--index", "2", "--json",
               "--data-dir", str(data)]) == 0
  record = json.loads(capsys.readouterr().out)
  assert record["tokens"] == _gray_by_loop(raw["test"][0][2:3])[0].tolist()
  assert record["length"] == 1024 and record["label"] == raw["test"][1][2]
  run_dir = tmp_path / "run"
  assert main(["run", "image", "softmax", "--preset", "smoke", "--data-dir", str(data),
               "--run-dir", str(run_dir), "--quiet"]) == 0
  final = json.loads((run_dir / "final.json").read_text())
  assert final["status"] == "complete" and final["step"] == 2 and final["seq_len"] == 1024
  from test_spt import pretrain_and_fine_tune  # pylint: disable=import-outside-toplevel
  pretrain_and_fine_tune("image", data, tmp_path)  # L1 on pixel values
