"""Text: byte-level IMDb sentiment, from `aclImdb/`, `aclImdb_v1.tar.gz` or a TFDS data dir.

Validation is the test set by default (the LRA convention); `val_from_train_fraction` > 0 holds out
a seeded slice of train instead. meta.json's `validation` says which was used.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np

from lra import errors
from lra.tasks.sources import bytes_tokenizer, downloads, tfds_reader
from lra.tasks.contract.build import CacheWriter, Recipe, build
from lra.tasks.contract.cache import SPLITS
from lra.tasks.contract.fingerprint import sha256_of, stat_digest
from lra.tasks.sources.release import locate
from lra.tasks.contract.spec import Task

SEQ_LEN = 4000
NUM_CLASSES = 2
LABEL_NAMES = ("neg", "pos")  # the order of TFDS imdb_reviews' ClassLabel
TFDS_NAME = "imdb_reviews/plain_text"
URL = downloads.ACLIMDB.url  # Maas et al. 2011
COMMAND = ("lra data prepare text --source PATH   "
           "(PATH = aclImdb/, aclImdb_v1.tar.gz, or a TFDS data dir holding imdb_reviews)")
_REVIEW = re.compile(r"(?:^|/)aclImdb/(train|test)/(neg|pos)/(\d+)_\d+\.txt$")
_REVIEW_NAME = re.compile(r"(\d+)_\d+\.txt")


@dataclasses.dataclass(frozen=True)
class _Source:
  path: Path
  format: str  # "aclImdb folder" | "aclImdb_v1.tar.gz" | "tfds imdb_reviews"


def _find(root: Path) -> _Source | None:
  """A supported IMDb copy at or directly inside root."""
  if root.is_file() and root.name.endswith((".tar.gz", ".tgz")):
    return _Source(root, "aclImdb_v1.tar.gz")
  if not root.is_dir():
    return None
  if (root / "train").is_dir() and (root / "test").is_dir() and root.name == "aclImdb":
    return _Source(root, "aclImdb folder")
  if (root / "aclImdb").is_dir():
    return _Source(root / "aclImdb", "aclImdb folder")
  if (root / "aclImdb_v1.tar.gz").is_file():
    return _Source(root / "aclImdb_v1.tar.gz", "aclImdb_v1.tar.gz")
  if root.name == "imdb_reviews":
    return _Source(root.parent, "tfds imdb_reviews")
  if (root / "imdb_reviews").is_dir():
    return _Source(root, "tfds imdb_reviews")
  return None


def _locate(source: Path) -> _Source:
  """Finds a supported IMDb copy at, inside, or under either nesting of lra_release/ in source."""
  return locate(source, _find, "IMDb reviews: an unpacked aclImdb/ folder "
                "(aclImdb/{train,test}/{pos,neg}/*.txt), the aclImdb_v1.tar.gz archive, or a TFDS "
                "data dir holding imdb_reviews/plain_text/<version>/", COMMAND,
                download=downloads.ACLIMDB)


def _folder_files(root: Path) -> list[tuple[str, int, int, Path]]:
  """(split, label, review id, path) of every labelled review, in a fixed order."""
  entries = []
  for split in ("train", "test"):
    for label, name in enumerate(LABEL_NAMES):
      folder = root / split / name
      files = sorted(folder.glob("*.txt")) if folder.is_dir() else []
      if not files:
        raise errors.NotFound(f"Expected review files {folder}/<id>_<rating>.txt, found none.\n"
                              f"Is {root} a complete unpacked aclImdb_v1.tar.gz? Try: {COMMAND}")
      for f in files:
        match = _REVIEW_NAME.fullmatch(f.name)
        if match is None:
          raise errors.BadValue(f"Unexpected file name {f} (expected <id>_<rating>.txt).")
        entries.append((split, label, int(match.group(1)), f))
  return sorted(entries, key=lambda e: e[:3])


def _checksums(src: _Source) -> dict[str, str]:
  if src.format == "aclImdb folder":
    files = [e[3] for e in _folder_files(src.path)]
    return {"aclImdb/{train,test}/{neg,pos}/*.txt": stat_digest(src.path, files)}
  if src.format == "aclImdb_v1.tar.gz":
    return sha256_of(src.path.parent, [src.path])
  tfds_dir = src.path / TFDS_NAME
  files = sorted(p for p in tfds_dir.rglob("*") if p.is_file())
  if not any(p.name == "dataset_info.json" for p in files):
    raise errors.NotFound(
        f"TFDS data dir {src.path} has no prepared {TFDS_NAME} (expected "
        f"{tfds_dir}/<version>/dataset_info.json and its tfrecord files). This suite never "
        f"downloads: prepare imdb_reviews with TFDS yourself, or use aclImdb instead.\n"
        f"Try: {COMMAND}")
  return sha256_of(src.path, files)


def _read_reviews(src: _Source) -> dict[str, tuple[list[bytes], np.ndarray]]:
  """{"train"|"test": (texts, labels[N])}; a text is its file's bytes stripped, as in TFDS."""
  if src.format == "tfds imdb_reviews":
    return _read_tfds(src.path)
  rows: list[tuple[str, int, int, bytes]] = []
  if src.format == "aclImdb folder":
    for split, label, review_id, path in _folder_files(src.path):
      rows.append((split, label, review_id, path.read_bytes().strip()))
  else:
    with downloads.open_tar_gz(src.path, downloads.ACLIMDB, COMMAND) as archive:
      for member in archive:
        match = _REVIEW.search(member.name)
        if member.isfile() and match:
          text = archive.extractfile(member).read().strip()
          label = LABEL_NAMES.index(match.group(2))
          rows.append((match.group(1), label, int(match.group(3)), text))
    rows.sort(key=lambda r: r[:3])
  out = {}
  for split in ("train", "test"):
    chosen = [r for r in rows if r[0] == split]
    if not chosen and src.format == "aclImdb_v1.tar.gz":  # another archive, or one cut short
      raise downloads.damaged(src.path, downloads.ACLIMDB, f"holds no aclImdb/{split}/"
                              "{pos,neg}/*.txt reviews", COMMAND)
    if not chosen:
      raise errors.BadValue(f"{src.path} holds no aclImdb/{split}/{{pos,neg}}/*.txt reviews.\n"
                            f"Try: {COMMAND}")
    out[split] = ([r[3] for r in chosen], np.array([r[1] for r in chosen], dtype=np.int32))
  return out


def _read_tfds(data_dir: Path) -> dict[str, tuple[list[bytes], np.ndarray]]:
  splits = tfds_reader.read_splits(TFDS_NAME, data_dir, "text", "aclImdb/ or aclImdb_v1.tar.gz")
  return {split: ([bytes(t) for t in texts], np.array(labels, dtype=np.int32))
          for split, (texts, labels) in splits.items()}


def _encode_all(texts: list[bytes]) -> tuple[np.ndarray, int]:
  inputs = np.zeros((len(texts), SEQ_LEN), dtype=bytes_tokenizer.DTYPE)
  truncated = sum(bytes_tokenizer.encode_into(row, text) for row, text in zip(inputs, texts))
  return inputs, truncated


def prepare(source: Path, out_dir: Path, *, val_from_train_fraction: float = 0.0,
            split_seed: int = 0) -> dict:
  """Tokenises IMDb into the cache at out_dir and returns its meta (a no-op when up to date).

  Args:
    source: aclImdb/, aclImdb_v1.tar.gz, a TFDS data dir, or a folder holding one of them.
    out_dir: the cache folder.
    val_from_train_fraction: 0 = validate on the test set (LRA); in (0, 1) = hold out this
      fraction of train, chosen by `split_seed`.
    split_seed: seed of the held-out slice (unused when the fraction is 0).
  """
  fraction, seed = float(val_from_train_fraction), int(split_seed)
  if not 0.0 <= fraction < 1.0:
    raise errors.BadValue(f"val_from_train_fraction must be in [0, 1), got {fraction} "
                     f"(0 = the LRA convention: validate on the test set).")
  src = _locate(source)
  options = {"val_from_train_fraction": fraction}
  if fraction:
    options["split_seed"] = seed
  recipe = Recipe(task="text", source_path=src.path, source_format=src.format,
                  checksums=_checksums(src), options=options,
                  tokenizer=bytes_tokenizer.describe(SEQ_LEN))

  def write(out: CacheWriter) -> dict:
    reviews = _read_reviews(src)
    train_texts, train_labels = reviews["train"]
    if fraction:
      num_val = int(round(fraction * len(train_texts)))
      if not 0 < num_val < len(train_texts):
        raise errors.BadValue(f"val_from_train_fraction={fraction} of {len(train_texts)} training "
                              "reviews leaves an empty split.")
      perm = np.random.default_rng(seed).permutation(len(train_texts))
      chosen = {"val": np.sort(perm[:num_val]), "train": np.sort(perm[num_val:])}
      texts = {k: [train_texts[i] for i in idx] for k, idx in chosen.items()}
      labels = {k: train_labels[idx] for k, idx in chosen.items()}
      validation = f"held-out {fraction:g} of train (split_seed {seed})"
    else:
      texts = {"train": train_texts, "val": reviews["test"][0]}
      labels = {"train": train_labels, "val": reviews["test"][1]}
      validation = "test set (LRA convention: val = test)"
    texts["test"], labels["test"] = reviews["test"]
    counts, truncated = {}, {}
    for split in SPLITS:
      inputs, truncated[split] = _encode_all(texts[split])
      out.write(split, "inputs", inputs)
      out.write(split, "label", labels[split])
      counts[split] = len(inputs)
    print(f"text: prepared {counts} from {src.path} ({src.format}); validation = {validation}.",
          flush=True)
    facts = {"vocab_size": bytes_tokenizer.VOCAB_SIZE, "seq_len": SEQ_LEN,
             "num_classes": NUM_CLASSES, "dual": False, "pad_id": bytes_tokenizer.PAD_ID,
             "splits": counts, "validation": validation, "label_names": list(LABEL_NAMES),
             "num_truncated": truncated}
    if fraction:
      facts["split_seed"] = seed
    return facts

  return build(out_dir, recipe, write)


TASK = Task(
    name="text",
    description="Byte-level IMDb sentiment, 2 classes, length 4000",
    data_hint=f"Bring IMDb (nothing is downloaded; the official archive: {URL}), then run: "
              f"{COMMAND}",
    prepare=prepare,
    decode=bytes_tokenizer.decode,
)
