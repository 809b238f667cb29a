"""Retrieval (AAN pairs): TSV parsing, per-document tokens against plain Python, errors, caching."""
import json
import os

import numpy as np
import pytest

from lra.tasks import TASKS
from lra.tasks.sources import retrieval
from lra.tasks.contract.batches import make_batch
from lra.tasks.contract.cache import PreparedData

LABELS = ["1.0", "0", "0.0", "1", "1.0", "0.0", "1", "0", "1.0", "0.0", "1"]


def _rows(split, n):
  """(label text, id1, id2, text1, text2): UTF-8, quotes left alone, one doc over 4000 bytes."""
  rows = []
  for i in range(n):
    text1 = f'{split} paper {i} "quoted" naïve — résumé ' * (1 + i % 3)
    text2 = f"cited {i} ∑ " + ("x" * 4100 if i == 2 else "end")
    rows.append((LABELS[i % len(LABELS)], f"P{i}-1", f"P{i}-2", text1, text2))
  return rows


def _write_release(tsv_dir, sizes=(("train", 11), ("eval", 5), ("test", 4))):
  tsv_dir.mkdir(parents=True)
  written = {}
  for name, n in sizes:
    rows = _rows(name, n)
    lines = ["\t".join(r) for r in rows]
    end = "\r\n" if name == "eval" else "\n"  # Windows line ends are tolerated
    (tsv_dir / f"new_aan_pairs.{name}.tsv").write_bytes((end.join(lines) + end + "\n").encode())
    written[name] = rows
  return written


def _tokens(doc):
  ids = [b + 1 for b in doc.encode("utf-8")][:retrieval.SEQ_LEN]
  return np.pad(np.array(ids, dtype=np.int64), (0, retrieval.SEQ_LEN - len(ids)))


def test_tokens_labels_and_meta(tmp_path, monkeypatch):
  monkeypatch.setattr(retrieval, "_CHUNK_ROWS", 3)  # several chunks and a partial last one
  written = _write_release(tmp_path / "lra_release" / "lra_release" / "tsv_data")
  meta = retrieval.prepare(tmp_path / "lra_release", tmp_path / "cache")
  data = PreparedData(tmp_path / "cache")
  for split, name in (("train", "train"), ("val", "eval"), ("test", "test")):
    arrays = data.split(split)
    rows = written[name]
    assert arrays["inputs1"].dtype == np.uint16 and arrays["inputs2"].shape == (len(rows), 4000)
    for i, (label, _, _, text1, text2) in enumerate(rows):
      np.testing.assert_array_equal(arrays["inputs1"][i], _tokens(text1))
      np.testing.assert_array_equal(arrays["inputs2"][i], _tokens(text2))
      assert arrays["label"][i] == int(float(label))
  assert meta["splits"] == {"train": 11, "val": 5, "test": 4}
  assert meta["dual"] is True and data.spec.dual and data.spec.seq_len == 4000
  assert meta["num_truncated"] == {"train": 1, "val": 1, "test": 1}
  assert sorted(meta["source"]["checksums"]) == sorted(retrieval.FILES.values())
  batch = make_batch(data.split("train"), np.array([2, 0]), data.spec)
  assert batch["mask2"][0].sum() == 4000 and batch["mask1"][1].sum() == len(
      written["train"][0][3].encode())
  assert TASKS["retrieval"] is retrieval.TASK
  assert retrieval.TASK.decode(data.split("test")["inputs1"][1]) == written["test"][1][3]


@pytest.mark.parametrize("where", ["", "lra_release", "tsv_data"])
def test_source_may_be_any_level(tmp_path, where):
  _write_release(tmp_path / "lra_release" / "tsv_data")
  source = tmp_path / "lra_release" / "tsv_data" if where == "tsv_data" else tmp_path / where
  assert retrieval.prepare(source, tmp_path / "cache")["splits"]["test"] == 4


def test_malformed_rows_name_file_and_line(tmp_path):
  tsv = tmp_path / "tsv_data"
  _write_release(tsv)
  path = tsv / "new_aan_pairs.test.tsv"
  lines = path.read_text().splitlines()
  lines[2] = "1\tonly\tfour\tfields"
  path.write_text("\n".join(lines) + "\n")
  with pytest.raises(ValueError, match=r"new_aan_pairs\.test\.tsv:3: expected 5 .*found 4"):
    retrieval.prepare(tmp_path, tmp_path / "cache")
  lines[2] = "yes\ta\tb\tc\td"
  path.write_text("\n".join(lines) + "\n")
  with pytest.raises(ValueError, match=r"new_aan_pairs\.test\.tsv:3: label b'yes'"):
    retrieval.prepare(tmp_path, tmp_path / "cache")
  lines[2] = "2.0\ta\tb\tc\td"
  path.write_text("\n".join(lines) + "\n")
  with pytest.raises(ValueError, match=r"test\.tsv:3: label b'2\.0' is not 0 or 1"):
    retrieval.prepare(tmp_path, tmp_path / "cache")


def test_missing_files_are_named(tmp_path):
  with pytest.raises(FileNotFoundError, match=r"tsv_data.*Looked at"):
    retrieval.prepare(tmp_path, tmp_path / "cache")
  _write_release(tmp_path / "tsv_data", sizes=(("train", 2), ("test", 2)))
  with pytest.raises(FileNotFoundError, match=r"lacks new_aan_pairs\.eval\.tsv"):
    retrieval.prepare(tmp_path, tmp_path / "cache")


def test_idempotent_and_change_detected(tmp_path, capsys):
  _write_release(tmp_path / "tsv_data")
  cache = tmp_path / "cache"
  retrieval.prepare(tmp_path, cache)
  stamp = os.stat(cache / "train.inputs1.npy").st_mtime_ns
  capsys.readouterr()
  retrieval.prepare(tmp_path, cache)
  assert "up to date" in capsys.readouterr().out
  assert os.stat(cache / "train.inputs1.npy").st_mtime_ns == stamp
  with open(tmp_path / "tsv_data" / "new_aan_pairs.train.tsv", "a") as f:
    f.write("0\ta\tb\tnew left\tnew right\n")
  meta = retrieval.prepare(tmp_path, cache)
  assert "up to date" not in capsys.readouterr().out
  assert meta["splits"]["train"] == 12
  arrays = PreparedData(cache).split("train")
  np.testing.assert_array_equal(arrays["inputs2"][-1], _tokens("new right"))
  assert not list(cache.glob("*.tmp")) and not list(cache.glob("*.oversize"))


def test_cli_inspect_pairs_and_smoke_run(tmp_path, capsys):
  """`lra data inspect retrieval` shows both documents; `lra run ... --preset smoke` trains."""
  from lra.cli import main
  written = _write_release(tmp_path / "release" / "tsv_data",
                           sizes=(("train", 4), ("eval", 2), ("test", 2)))
  data = tmp_path / "data"
  assert main(["data", "prepare", "retrieval", "--source", str(tmp_path / "release"),
               "--data-dir", str(data)]) == 0
  capsys.readouterr()
  assert main(["data", "inspect", "retrieval", "--split", "val", "--index", "1", "--json",
               "--data-dir", str(data)]) == 0
  record = json.loads(capsys.readouterr().out)
  _, _, _, text1, text2 = written["eval"][1]
  assert record["text1"] == text1 and record["text2"] == text2
  assert record["tokens1"] == _tokens(text1)[:len(text1.encode())].tolist()
  assert (record["length1"], record["length2"]) == (len(text1.encode()), len(text2.encode()))
  run_dir = tmp_path / "run"
  assert main(["run", "retrieval", "softmax", "--preset", "smoke", "--data-dir", str(data),
               "--run-dir", str(run_dir), "--quiet"]) == 0
  final = json.loads((run_dir / "final.json").read_text())
  assert final["status"] == "complete" and final["step"] == 2
  from test_spt import pretrain_and_fine_tune  # pylint: disable=import-outside-toplevel
  pretrain_and_fine_tune("retrieval", data, tmp_path)  # both documents hidden and predicted
