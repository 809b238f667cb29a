"""Retrieval: AAN citation pairs from the release's `tsv_data/new_aan_pairs.{train,eval,test}.tsv`.

An example is two byte-level documents of 4000 tokens each (`inputs1`, `inputs2`); the model
encodes both with one shared encoder and classifies [u, v, u*v, u-v]. Rows are streamed to disk:
the train split alone is about 2.4 GB of tokens.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from lra import errors
from lra.tasks.sources import bytes_tokenizer, downloads
from lra.tasks.contract.build import CacheWriter, Recipe, build
from lra.tasks.contract.cache import SPLITS
from lra.tasks.contract.fingerprint import sha256_of
from lra.base.progress import tracked
from lra.tasks.sources.release import RELEASE_URL, find_in_release
from lra.tasks.contract.spec import Task

SEQ_LEN = 4000  # per document
NUM_CLASSES = 2
FILES = {"train": "new_aan_pairs.train.tsv", "val": "new_aan_pairs.eval.tsv",
         "test": "new_aan_pairs.test.tsv"}
COMMAND = "lra data prepare retrieval --source PATH   (PATH = lra_release/, or its tsv_data/)"
_CHUNK_ROWS = 512


def _locate(source: Path) -> dict[str, Path]:
  folder = find_in_release(source, "tsv_data", "the LRA release's tsv_data/ folder with "
                           + ", ".join(FILES.values()), COMMAND)
  missing = [name for name in FILES.values() if not (folder / name).is_file()]
  if missing:
    raise errors.NotFound(f"{folder} lacks {', '.join(missing)} (expected all of "
                          f"{', '.join(FILES.values())}).\nTry: {COMMAND}")
  return {split: folder / name for split, name in FILES.items()}


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
  """(1-based line number, line without its end) for every non-blank line."""
  with open(path, "rb") as f:
    for number, line in enumerate(f, start=1):
      line = line.rstrip(b"\n").rstrip(b"\r")
      if line.strip():
        yield number, line


def _parse(path: Path, number: int, line: bytes) -> tuple[int, bytes, bytes]:
  """(label, text1, text2) of one `label<TAB>id1<TAB>id2<TAB>text1<TAB>text2` row; a row that is
  not one names the file's size and sha256 and how to fetch it again."""

  def bad(problem: str) -> errors.BadValue:
    return downloads.damaged(path, downloads.LRA_RELEASE, problem, COMMAND,
                             inside=downloads.LRA_RELEASE, line=number)

  fields = line.split(b"\t")
  if len(fields) != 5:
    raise bad(f"expected 5 tab-separated fields (label, id1, id2, text1, text2), found "
              f"{len(fields)}")
  try:
    value = float(fields[0])
  except ValueError:
    raise bad(f"label {fields[0][:20]!r} is not a number (expected 0 or 1, possibly written 0.0 "
              "or 1.0)") from None
  if value not in (0.0, 1.0):
    raise bad(f"label {fields[0][:20]!r} is not 0 or 1")
  return int(value), fields[3], fields[4]


def _write_split(path: Path, out: CacheWriter, split: str) -> tuple[int, int]:
  """Tokenises one TSV into the new cache; returns (rows, documents truncated)."""
  capacity = sum(1 for _ in _lines(path))
  writers = [out.rows(split, key, capacity, SEQ_LEN, bytes_tokenizer.DTYPE)
             for key in ("inputs1", "inputs2")]
  chunks = [np.zeros((_CHUNK_ROWS, SEQ_LEN), dtype=bytes_tokenizer.DTYPE) for _ in writers]
  labels, truncated, filled = [], 0, 0
  for number, line in tracked(_lines(path), f"retrieval: tokenising {split}", capacity, "pairs"):
    label, *docs = _parse(path, number, line)
    for chunk, doc in zip(chunks, docs):
      truncated += bytes_tokenizer.encode_into(chunk[filled], doc)
    labels.append(label)
    filled += 1
    if filled == _CHUNK_ROWS:
      for writer, chunk in zip(writers, chunks):
        writer.append(chunk)
      filled = 0
  for writer, chunk in zip(writers, chunks):
    writer.append(chunk[:filled])
    writer.close()
  out.write(split, "label", np.array(labels, dtype=np.int32))
  return len(labels), truncated


def prepare(source: Path, out_dir: Path) -> dict:
  """Tokenises the three AAN TSVs into the cache at out_dir and returns its meta.

  A no-op when the cache is current: same files (sha256), same tokeniser, arrays intact.
  """
  paths = _locate(source)
  folder = paths["train"].parent
  recipe = Recipe(task="retrieval", source_path=folder, source_format="lra_release tsv_data",
                  checksums=sha256_of(folder, paths.values()), options={},
                  tokenizer=bytes_tokenizer.describe(SEQ_LEN) + ", per document")

  def write(out: CacheWriter) -> dict:
    counts, truncated = {}, {}
    for split in SPLITS:
      counts[split], truncated[split] = _write_split(paths[split], out, split)
      if not counts[split]:
        raise errors.BadValue(f"{paths[split]} has no rows.\nTry: {COMMAND}")
    print(f"retrieval: prepared {counts} pairs from {folder}.", flush=True)
    return {"vocab_size": bytes_tokenizer.VOCAB_SIZE, "seq_len": SEQ_LEN,
            "num_classes": NUM_CLASSES, "dual": True, "pad_id": bytes_tokenizer.PAD_ID,
            "splits": counts, "validation": "the release's eval split (new_aan_pairs.eval.tsv)",
            "num_truncated": truncated}

  return build(out_dir, recipe, write)


TASK = Task(
    name="retrieval",
    description="AAN document-pair citation match, 2 x 4000 bytes",
    data_hint=(f"Bring the LRA release (nothing is downloaded; the official archive: "
               f"{RELEASE_URL}), then run: {COMMAND}"),
    prepare=prepare,
    decode=bytes_tokenizer.decode,
)
