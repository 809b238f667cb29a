"""lra/base/manifest.py: the one sha256 manifest behind checkpoints' seals, packs and the
data cache; its entries equal the formats already on disk (the committed packs still verify)."""
import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from lra.runs import checkpoints, pack
from lra.base import manifest

ROOT = Path(__file__).resolve().parents[1]
COMMITTED_PACKS = sorted((ROOT / "results").glob("*/*/run.pack"))


def test_an_entry_is_the_size_and_sha256_of_the_bytes_or_the_file(tmp_path):
  data = b"x" * 3_000_000  # more than one read chunk
  (tmp_path / "f").write_bytes(data)
  want = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
  assert manifest.entry(data) == manifest.entry(tmp_path / "f") == want
  assert manifest.entry(data, prefix=manifest.PREFIX)["sha256"] == "sha256:" + want["sha256"]


def test_a_folders_entries_and_what_differs_later(tmp_path):
  (tmp_path / "sub").mkdir()
  (tmp_path / "sub" / "b").write_bytes(b"bb")
  (tmp_path / "a").write_bytes(b"a")
  (tmp_path / "seal.json").write_text("{}")
  files = manifest.entries(tmp_path, skip="seal.json")
  assert list(files) == ["a", "sub/b"]
  assert manifest.first_problem(tmp_path, files) is None
  (tmp_path / "sub" / "b").write_bytes(b"b")
  assert manifest.first_problem(tmp_path, files) == "sub/b is cut short: 1 bytes, 2 when written"
  (tmp_path / "sub" / "b").write_bytes(b"bc")
  assert manifest.problem(tmp_path / "sub" / "b", files["sub/b"]) == (
      "has changed since it was written (sha256 differs)")
  (tmp_path / "a").unlink()
  assert manifest.first_problem(tmp_path, files) == "a is missing"
  # meta.json's prefixed digests read the same as bare ones.
  (tmp_path / "a").write_bytes(b"a")
  prefixed = manifest.entry(tmp_path / "a", prefix=manifest.PREFIX)
  assert manifest.problem(tmp_path / "a", prefixed) is None


@pytest.mark.skipif(not COMMITTED_PACKS, reason="no committed run.pack under results/")
def test_the_committed_packs_and_their_checkpoint_seals_still_verify(tmp_path):
  archive = min(COMMITTED_PACKS, key=lambda p: p.stat().st_size)
  with tarfile.open(archive) as tar:
    place = json.loads(tar.extractfile(pack.MANIFEST).read())["run"]
  target, _ = pack.unpack(archive, tmp_path)  # checks every member's size and sha256
  assert target == tmp_path / place
  sealed = [p.parent for p in target.glob(f"checkpoints/*/{checkpoints.MANIFEST}")]
  assert sealed, "a pack of an unfinished run carries a sealed checkpoint"
  for folder in sealed:
    assert checkpoints.damage(folder) is None
    # Sealing it again writes what the committed seal holds, entry for entry.
    written = json.loads((folder / checkpoints.MANIFEST).read_text())["files"]
    assert manifest.entries(folder, skip=checkpoints.MANIFEST) == written
