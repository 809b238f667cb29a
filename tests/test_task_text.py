"""Text (IMDb bytes): every source format, tokens against plain Python, splits, caching."""
import json
import os
import sys
import tarfile
import types

import numpy as np
import pytest

from lra.tasks import TASKS
from lra.tasks.sources import bytes_tokenizer, text
from lra.tasks.contract.cache import PreparedData

WORDS = ["great", "awful", "plot", "film", "naïve", "café", "☃", "🎬", "<br />", "the", "and"]


def _reviews(seed):
  """{split: [(label, id, rating, raw bytes)]}: mixed UTF-8, padding whitespace, one long review."""
  rng = np.random.default_rng(seed)
  out = {}
  for split, n in (("train", 14), ("test", 8)):
    rows = []
    for i in range(n):
      label = i % 2
      words = rng.choice(WORDS, size=int(rng.integers(1, 40)))
      body = " ".join(words)
      if split == "train" and i == 3:
        body = "long " + "é" * 2500  # 5005 bytes: truncated, with a 2-byte character cut at 4000
      raw = ("\n  " + body + " \n").encode("utf-8")
      rows.append((label, 100 - i, 1 + 9 * label, raw))
    out[split] = rows
  return out


def _write_folder(root, reviews):
  for split, rows in reviews.items():
    for label, review_id, rating, raw in rows:
      folder = root / "aclImdb" / split / text.LABEL_NAMES[label]
      folder.mkdir(parents=True, exist_ok=True)
      (folder / f"{review_id}_{rating}.txt").write_bytes(raw)
    # unlabelled reviews and stray files are not part of the task
    (root / "aclImdb" / split / "urls_pos.txt").write_text("http://example.com\n")
  (root / "aclImdb" / "train" / "unsup").mkdir(exist_ok=True)
  (root / "aclImdb" / "train" / "unsup" / "0_0.txt").write_bytes(b"unlabelled")
  return root / "aclImdb"


def _expected(reviews, split):
  """Tokens by hand: bytes of the stripped file + 1, padded with 0, in (label, id) order."""
  rows = sorted(reviews[split], key=lambda r: (r[0], r[1]))
  tokens = np.zeros((len(rows), text.SEQ_LEN), dtype=np.int64)
  for row, (_, _, _, raw) in zip(tokens, rows):
    ids = [b + 1 for b in raw.strip()][:text.SEQ_LEN]
    row[:len(ids)] = ids
  return tokens, np.array([r[0] for r in rows])


@pytest.fixture
def reviews():
  return _reviews(0)


def test_folder_tokens_labels_and_meta(tmp_path, reviews):
  source = _write_folder(tmp_path / "raw", reviews)
  meta = text.prepare(source, tmp_path / "cache")
  data = PreparedData(tmp_path / "cache")
  for split, source_split in (("train", "train"), ("val", "test"), ("test", "test")):
    arrays = data.split(split)
    tokens, labels = _expected(reviews, source_split)
    assert arrays["inputs"].dtype == np.uint16
    np.testing.assert_array_equal(arrays["inputs"], tokens)
    np.testing.assert_array_equal(arrays["label"], labels)
  assert meta["splits"] == {"train": 14, "val": 8, "test": 8}
  assert (meta["vocab_size"], meta["seq_len"], meta["num_classes"], meta["pad_id"]) == (
      257, 4000, 2, 0)
  assert meta["dual"] is False
  assert meta["source"]["format"] == "aclImdb folder"
  assert meta["validation"].startswith("test set")
  assert meta["num_truncated"]["train"] == 1
  assert "split_seed" not in meta  # no random split was made
  assert data.spec.vocab_size == 257


def test_archive_matches_folder(tmp_path, reviews):
  folder = _write_folder(tmp_path / "raw", reviews)
  archive = tmp_path / "dl" / "aclImdb_v1.tar.gz"
  archive.parent.mkdir()
  with tarfile.open(archive, "w:gz") as tar:
    tar.add(folder, arcname="aclImdb")
  meta = text.prepare(tmp_path / "dl", tmp_path / "from_tar")  # the folder holding the archive
  assert meta["source"]["format"] == "aclImdb_v1.tar.gz"
  assert list(meta["source"]["checksums"]) == ["aclImdb_v1.tar.gz"]
  text.prepare(folder, tmp_path / "from_folder")
  a, b = PreparedData(tmp_path / "from_tar"), PreparedData(tmp_path / "from_folder")
  for split in ("train", "val", "test"):
    for key in ("inputs", "label"):
      np.testing.assert_array_equal(a.split(split)[key], b.split(split)[key])


@pytest.mark.parametrize("nesting", ["lra_release", "lra_release/lra_release"])
def test_either_release_nesting(tmp_path, reviews, nesting):
  _write_folder(tmp_path / nesting, reviews)
  meta = text.prepare(tmp_path, tmp_path / "cache")
  assert meta["splits"]["train"] == 14


def test_held_out_validation_partitions_train(tmp_path, reviews):
  source = _write_folder(tmp_path / "raw", reviews)
  meta = text.prepare(source, tmp_path / "cache", val_from_train_fraction="0.25", split_seed="3")
  data = PreparedData(tmp_path / "cache")
  tokens, labels = _expected(reviews, "train")
  val_rows = data.split("val")["inputs"]
  train_rows = data.split("train")["inputs"]
  assert len(val_rows) == 4 and len(train_rows) == 10
  together = np.concatenate([train_rows, val_rows])
  key = lambda a: sorted(map(bytes, np.asarray(a, dtype=np.int64)))  # rows as a multiset
  assert key(together) == key(tokens)
  assert meta["split_seed"] == 3
  assert meta["options"] == {"val_from_train_fraction": 0.25, "split_seed": 3}
  assert "held-out" in meta["validation"]
  test_tokens, _ = _expected(reviews, "test")
  np.testing.assert_array_equal(data.split("test")["inputs"], test_tokens)
  # a different seed picks a different slice
  text.prepare(source, tmp_path / "other", val_from_train_fraction=0.25, split_seed=4)
  other = PreparedData(tmp_path / "other").split("val")["inputs"]
  assert key(other) != key(val_rows)


def test_prepare_is_idempotent_and_detects_changes(tmp_path, reviews, capsys):
  source = _write_folder(tmp_path / "raw", reviews)
  cache = tmp_path / "cache"
  text.prepare(source, cache)
  stamp = os.stat(cache / "train.inputs.npy").st_mtime_ns
  capsys.readouterr()
  text.prepare(source, cache)
  assert "up to date" in capsys.readouterr().out
  assert os.stat(cache / "train.inputs.npy").st_mtime_ns == stamp
  # a changed option re-prepares
  text.prepare(source, cache, val_from_train_fraction=0.5)
  assert "up to date" not in capsys.readouterr().out
  # an edited review re-prepares and its new bytes are in the cache
  edited = sorted((source / "train" / "neg").glob("*.txt"))[0]
  edited.write_bytes(b"Z" * 7)
  os.utime(edited, ns=(1, 1))
  text.prepare(source, cache, val_from_train_fraction=0.5)
  assert "up to date" not in capsys.readouterr().out
  data = PreparedData(cache)
  rows = np.concatenate([data.split("train")["inputs"], data.split("val")["inputs"]])
  assert any((row[:7] == ord("Z") + 1).all() and row[7] == 0 for row in rows)


def test_missing_source_names_what_was_expected(tmp_path):
  (tmp_path / "empty").mkdir()
  with pytest.raises(FileNotFoundError, match=r"aclImdb.*aclImdb_v1\.tar\.gz.*imdb_reviews"):
    text.prepare(tmp_path / "empty", tmp_path / "cache")
  with pytest.raises(FileNotFoundError, match="does not exist"):
    text.prepare(tmp_path / "nowhere", tmp_path / "cache")
  broken = tmp_path / "broken" / "aclImdb"
  (broken / "train" / "pos").mkdir(parents=True)
  (broken / "test").mkdir()
  with pytest.raises(FileNotFoundError, match=r"train/neg/<id>_<rating>\.txt"):
    text.prepare(broken, tmp_path / "cache")


def _tfds_dir(root):
  version = root / "imdb_reviews" / "plain_text" / "1.0.0"
  version.mkdir(parents=True)
  (version / "dataset_info.json").write_text("{}")
  (version / "imdb_reviews-train.tfrecord-00000-of-00001").write_bytes(b"records")
  return root


def test_tfds_without_the_package_says_how_to_install(tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # import fails
  with pytest.raises(ImportError, match=r"pip install -e \.\[tfds\]"):
    text.prepare(_tfds_dir(tmp_path / "tfds"), tmp_path / "cache")


def test_tfds_dir_read_through_the_tfds_api(tmp_path, reviews, monkeypatch):
  """TFDS needs TensorFlow to read records, so a stand-in module serves the same reviews."""
  calls = []

  def builder(name, data_dir):
    calls.append((name, data_dir))
    def as_dataset(split, shuffle_files):
      assert shuffle_files is False
      rows = reviews[split][::-1]  # TFDS keeps its own order, so compare as multisets
      return [{"text": np.bytes_(raw.strip()), "label": np.int64(label)}
              for label, _, _, raw in rows]
    return types.SimpleNamespace(as_dataset=as_dataset)

  fake = types.SimpleNamespace(builder=builder, as_numpy=lambda ds: iter(ds))
  monkeypatch.setitem(sys.modules, "tensorflow_datasets", fake)
  data_dir = _tfds_dir(tmp_path / "tfds")
  meta = text.prepare(data_dir / "imdb_reviews", tmp_path / "cache")
  assert calls == [("imdb_reviews/plain_text", str(data_dir))]
  assert meta["source"]["format"] == "tfds imdb_reviews"
  assert any(k.endswith("dataset_info.json") for k in meta["source"]["checksums"])
  arrays = PreparedData(tmp_path / "cache").split("test")
  tokens, labels = _expected(reviews, "test")
  key = lambda a, y: sorted(zip(map(bytes, np.asarray(a, dtype=np.int64)), y))
  assert key(arrays["inputs"], arrays["label"]) == key(tokens, labels)


def test_decode_and_registry():
  sample = "Caf\u00e9 \u2603 ok"
  assert text.TASK.decode(bytes_tokenizer.encode(sample, 32)) == sample
  assert TASKS["text"] is text.TASK and TASKS["text"].decode is not None


def test_cli_prepare_inspect_and_smoke_run(tmp_path, reviews, capsys):
  """`lra data prepare|inspect text` and `lra run text softmax --preset smoke` on a tiny copy."""
  from lra.cli import main
  source, data = _write_folder(tmp_path / "raw", reviews), tmp_path / "data"
  assert main(["data", "prepare", "text", "--source", str(source), "--data-dir", str(data),
               "--option", "val_from_train_fraction=0.25"]) == 0
  capsys.readouterr()
  assert main(["data", "inspect", "text", "--split", "test", "--index", "0", "--json",
               "--data-dir", str(data)]) == 0
  record = json.loads(capsys.readouterr().out)
  first = sorted(reviews["test"], key=lambda r: (r[0], r[1]))[0]
  assert record["text"] == first[3].strip().decode("utf-8")
  assert record["length"] == len(first[3].strip()) and record["label"] == first[0]
  run_dir = tmp_path / "run"
  assert main(["run", "text", "softmax", "--preset", "smoke", "--data-dir", str(data),
               "--run-dir", str(run_dir), "--quiet"]) == 0
  final = json.loads((run_dir / "final.json").read_text())
  assert final["status"] == "complete" and final["step"] == 2 and final["seq_len"] == 4000
  assert final["data"]["validation"].startswith("held-out 0.25 of train")
  assert final["data"]["options"] == {"val_from_train_fraction": 0.25, "split_seed": 0}
  from test_spt import pretrain_and_fine_tune  # pylint: disable=import-outside-toplevel
  pretrain_and_fine_tune("text", data, tmp_path)
