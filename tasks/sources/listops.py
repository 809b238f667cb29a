"""ListOps: read the release TSVs (or generated ones), tokenise with a fixed vocabulary, cache.

Vocabulary (fixed, so checkpoints mean the same thing in every process; the original LRA built it
from a Python set, whose order changes between runs):
  0 pad | 1-10 digits 0-9 | 11 [MIN | 12 [MAX | 13 [MED | 14 [SM | 15 ] (the closer)
Parentheses carry no information beyond the closers and are dropped, as in LRA.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from lra import errors
from lra.tasks.contract.build import CacheWriter, Recipe, build
from lra.tasks.contract.fingerprint import sha256_of
from lra.base.progress import Meter
from lra.tasks.generators import listops as listops_generator
from lra.tasks.sources import downloads
from lra.tasks.sources.release import RELEASE_URL, locate
from lra.tasks.contract.spec import Task

SYMBOLS = ("<pad>", *map(str, range(10)), "[MIN", "[MAX", "[MED", "[SM", "]")
TOKEN_IDS = {symbol: i for i, symbol in enumerate(SYMBOLS)}
DROPPED = frozenset({"(", ")"})
NUM_CLASSES = 10
SPLIT_FILES = {"train": "basic_train.tsv", "val": "basic_val.tsv", "test": "basic_test.tsv"}
GENERATE_COMMAND = ("lra data generate listops --out DIR && "
                    "lra data prepare listops --source DIR")
REFETCH_COMMAND = ("lra data prepare listops --source PATH/lra_release (or generate the files: "
                   f"{GENERATE_COMMAND})")


def tokenize(source: str) -> list[int]:
  """Token ids of one Source string; raises KeyError on an unknown symbol."""
  return [TOKEN_IDS[word] for word in source.split() if word not in DROPPED]


def decode(tokens: np.ndarray) -> str:
  return " ".join(SYMBOLS[t] for t in np.asarray(tokens).tolist() if t != 0)


def read_tsv(path: Path, meter: Meter | None = None) -> tuple[list[list[int]], list[int]]:
  """Tokens and labels of one release TSV (header `Source<TAB>Target`); `meter` counts the
  characters read (bytes: the format is ASCII).

  Raises:
    ValueError naming the file and line of a malformed row, the file's size and sha256, and how
    to fetch or generate it again (a junk or cut-short file is the user's to replace).
  """
  tokens, labels = [], []

  def bad(number: int, problem: str) -> errors.BadValue:
    return downloads.damaged(path, downloads.LRA_RELEASE, problem, REFETCH_COMMAND,
                             inside=downloads.LRA_RELEASE, line=number)

  lines = downloads.text_table(path, "a ListOps TSV", downloads.LRA_RELEASE, REFETCH_COMMAND)
  header = next(lines, "").rstrip("\n").split("\t")
  if header != ["Source", "Target"]:
    raise bad(1, f"expected the header 'Source<TAB>Target', found {header!r:.60}")
  for line_number, line in enumerate(lines, start=2):
    if meter is not None:
      meter.advance(len(line))
    line = line.rstrip("\n")
    if not line:
      continue
    fields = line.split("\t")
    if len(fields) != 2:
      raise bad(line_number, f"expected 2 tab-separated fields (Source, Target), found "
                f"{len(fields)}")
    source, target = fields
    if target.strip() not in {str(d) for d in range(NUM_CLASSES)}:
      raise bad(line_number, f"Target must be a digit 0-9, found {target!r:.20}")
    try:
      tokens.append(tokenize(source))
    except KeyError as e:
      raise bad(line_number, f"unknown ListOps symbol {e.args[0]!r:.20} (valid: "
                f"{' '.join(SYMBOLS[1:])} and parentheses)") from None
    labels.append(int(target))
  return tokens, labels


def _folder(root: Path) -> Path | None:
  """A generated folder or listops-1000/ itself, else the release's listops-1000/ under root."""
  if (root / SPLIT_FILES["train"]).exists():
    return root
  return root / "listops-1000" if (root / "listops-1000").is_dir() else None


def prepare(source: Path, out_dir: Path, *, seq_len: int | None = None) -> dict:
  """Caches a release `listops-1000/` folder (either lra_release nesting) or a generated folder.

  Args:
    seq_len: padded length; default: the longest example rounded up to a multiple of 16
      (2000 for the release, whose examples are shorter than 2000).
  """
  folder = locate(source, _folder, "basic_{train,val,test}.tsv (a generated folder or the "
                  "release's listops-1000/)", GENERATE_COMMAND, shown="listops-1000")
  paths = {split: folder / name for split, name in SPLIT_FILES.items()}
  missing = [str(p) for p in paths.values() if not p.exists()]
  if missing:
    raise errors.NotFound("Missing ListOps files:\n  " + "\n  ".join(missing) +
                          f"\nTry: {GENERATE_COMMAND}")
  recipe = Recipe(
      task="listops", source_path=folder, source_format="LRA listops TSV",
      checksums=sha256_of(folder, paths.values()),
      options={} if seq_len is None else {"seq_len": int(seq_len)},
      tokenizer="fixed table: " + " ".join(f"{i}={s}" for i, s in enumerate(SYMBOLS)))

  def write(out: CacheWriter) -> dict:
    size = sum(path.stat().st_size for path in paths.values())
    with Meter("listops: reading", size, "MB", scale=1e6) as meter:
      parsed = {split: read_tsv(path, meter) for split, path in paths.items()}
    longest = max(len(t) for tokens, _ in parsed.values() for t in tokens)
    length = int(seq_len or math.ceil(longest / 16) * 16)
    if longest > length:
      raise errors.BadValue(f"listops: an example has {longest} tokens, more than seq_len={length}")
    for split, (tokens, labels) in parsed.items():
      inputs = np.zeros((len(tokens), length), dtype=np.uint16)
      for row, ids in enumerate(tokens):
        inputs[row, :len(ids)] = ids
      out.write(split, "inputs", inputs)
      out.write(split, "label", np.asarray(labels, dtype=np.int32))
    return {"vocab_size": len(SYMBOLS), "seq_len": length, "num_classes": NUM_CLASSES,
            "dual": False, "pad_id": 0,
            "splits": {split: len(labels) for split, (_, labels) in parsed.items()}}

  return build(out_dir, recipe, write)


def generate_small(raw_dir: Path, **params) -> None:
  # The laptop preset's 100,000 examples take minutes: progress shows (small sets stay quiet).
  listops_generator.write_release(raw_dir, progress=True, **params)


TASK = Task(
    name="listops",
    description="ListOps: nested MIN/MAX/MED/SM expressions, 10 classes, length <= 2000",
    data_hint=("Generate it (no download needed): lra data generate listops --out DIR && "
               "lra data prepare listops --source DIR\n"
               "or prepare the release (the official archive: " + RELEASE_URL + "): "
               "lra data prepare listops --source PATH/lra_release"),
    prepare=prepare, decode=decode, generate_small=generate_small)
