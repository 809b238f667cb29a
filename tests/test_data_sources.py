"""A damaged download is the user's to fetch again, not a bug: every `--source` format, junk or cut
short, ends `lra data prepare` in one line (exit 2) with the file's size and SHA-256 beside the
published ones (docs/data.md) and where to fetch it again."""
import hashlib
import os
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest

from lra.cli import main
from lra.tasks.sources import downloads
from test_task_image import _fake_cifar

ROOT = Path(__file__).resolve().parents[1]


def _tar_gz(path, folder, arcname):
  with tarfile.open(path, "w:gz") as archive:
    archive.add(folder, arcname=arcname)
  return path


def _imdb(tmp):
  for split in ("train", "test"):
    for label in ("neg", "pos"):
      folder = tmp / "aclImdb" / split / label
      folder.mkdir(parents=True)
      for i in range(6):
        review = os.urandom(2000).hex().encode()
        (folder / f"{i}_{3 + 4 * (label == 'pos')}.txt").write_bytes(review)
  return _tar_gz(tmp / "aclImdb_v1.tar.gz", tmp / "aclImdb", "aclImdb")


def _cifar_archive(tmp):
  _fake_cifar(tmp / "cifar-10-batches-py")
  return _tar_gz(tmp / "cifar-10-python.tar.gz", tmp / "cifar-10-batches-py",
                 "cifar-10-batches-py")


def _cifar_pickle(tmp):
  _fake_cifar(tmp / "cifar-10-batches-py")
  return tmp / "cifar-10-batches-py" / "data_batch_1"


def _listops_tsv(tmp):
  folder = tmp / "listops-1000"
  folder.mkdir()
  rows = "".join(f"( [MAX {i % 10} ( [MIN 3 {i % 7} ] ) ] )\t{i % 10}\n" for i in range(40))
  for name in ("basic_train.tsv", "basic_val.tsv", "basic_test.tsv"):
    (folder / name).write_text("Source\tTarget\n" + rows)
  return folder / "basic_train.tsv"


def _retrieval_tsv(tmp):
  folder = tmp / "tsv_data"
  folder.mkdir()
  rows = "".join(f"{i % 2}.0\tA{i}\tB{i}\tpaper {i} text\tcited {i} text\n" for i in range(40))
  for split in ("train", "eval", "test"):
    (folder / f"new_aan_pairs.{split}.tsv").write_text(rows)
  return folder / "new_aan_pairs.train.tsv"


def _pathfinder_metadata(tmp):
  folder = tmp / "pathfinder32" / "curv_contour_length_14"
  (folder / "metadata").mkdir(parents=True)
  (folder / "imgs" / "0").mkdir(parents=True)
  rows = np.array([["imgs/0", f"sample_{k}.png", str(k), str(k % 2), "1.8", "14", "4", "5", "1.5",
                    "2", "1"] for k in range(40)])
  with open(folder / "metadata" / "0.npy", "wb") as f:
    np.save(f, rows)  # the original generator's binary form
  return folder / "metadata" / "0.npy"


def _release_archive(tmp):
  _listops_tsv(tmp)
  return _tar_gz(tmp / "lra_release.gz", tmp / "listops-1000", "lra_release/listops-1000")


# format: (task, makes the file and returns it, --source given the file, what the line names)
FORMATS = {
    "aclImdb_v1.tar.gz": ("text", _imdb, lambda f: f, downloads.ACLIMDB),
    "cifar-10-python.tar.gz": ("image", _cifar_archive, lambda f: f, downloads.CIFAR10),
    "cifar pickle": ("image", _cifar_pickle, lambda f: f.parent, downloads.CIFAR10),
    "listops tsv": ("listops", _listops_tsv, lambda f: f.parent, downloads.LRA_RELEASE),
    "retrieval tsv": ("retrieval", _retrieval_tsv, lambda f: f.parent, downloads.LRA_RELEASE),
    "pathfinder metadata": ("pathfinder", _pathfinder_metadata, lambda f: f.parents[1],
                            downloads.LRA_RELEASE),
    "lra_release.gz": ("listops", _release_archive, lambda f: f, downloads.LRA_RELEASE),
}


@pytest.mark.parametrize("damage", ["junk", "truncated"])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_damaged_source_is_one_line_with_its_size_sha256_and_the_fetch(tmp_path, capsys, fmt,
                                                                         damage):
  task, make, source, download = FORMATS[fmt]
  path = make(tmp_path)
  whole = path.read_bytes()
  if damage == "junk":  # a login page saved under the archive's name, say
    path.write_bytes(b"<html>\x00\xff" + os.urandom(3000))
  else:
    path.write_bytes(whole[:len(whole) // 2])
  code = main(["data", "prepare", task, "--source", str(source(path)), "--data-dir",
               str(tmp_path / "cache")])
  err = capsys.readouterr().err
  assert code == 2, err
  assert "Traceback" not in err and "internal error" not in err
  [line] = err.strip().splitlines()
  assert line.startswith("lra: error: ")
  size = path.stat().st_size
  assert f"{size:,} bytes, sha256 {hashlib.sha256(path.read_bytes()).hexdigest()}" in line
  assert download.url in line and "lra data prepare" in line
  if download.sha256:
    assert f"{download.size:,} bytes, sha256 {download.sha256}" in line
  else:
    assert "unpublished size and checksum" in line
  if fmt == "lra_release.gz":  # a gzip file (cut short or whole) may just need unpacking
    assert ("unpack it first (tar xzf lra_release.gz)" if damage == "truncated" else
            "not a gzip archive either") in line
  if damage == "truncated" and fmt.endswith(".tar.gz"):
    assert "cut short" in line


def test_another_known_archive_is_named(tmp_path, capsys, monkeypatch):
  """The right file for another task (its size and sha256 match a published one) says so."""
  path = _cifar_archive(tmp_path)
  monkeypatch.setattr(downloads, "KNOWN", (*downloads.KNOWN, downloads.Download(
      "cifar-10-python.tar.gz", downloads.CIFAR10.url, path.stat().st_size,
      hashlib.sha256(path.read_bytes()).hexdigest(), "tar xzf cifar-10-python.tar.gz")))
  assert main(["data", "prepare", "text", "--source", str(path), "--data-dir",
               str(tmp_path / "cache")]) == 2
  line = capsys.readouterr().err.strip()
  assert (f"{path} is cifar-10-python.tar.gz (its size and sha256 match), not "
          "aclImdb_v1.tar.gz") in line


def test_the_published_figures_are_docs_data_md_s():
  table = (ROOT / "docs" / "data.md").read_text()
  for download in (downloads.ACLIMDB, downloads.CIFAR10):
    row = next(line for line in table.splitlines() if line.startswith("| ")
               and f"[{download.name}]({download.url})" in line)
    assert f"| {download.size:,} |" in row and f"`{download.sha256}`" in row
  row = next(line for line in table.splitlines() if f"[lra_release.gz]({downloads.LRA_RELEASE.url})"
             in line)
  assert re.search(r"\| not published .*\| not published \|", row)
