"""Pathfinder (32x32) from the release's `pathfinderN/curv_*/` PNGs and metadata; Path-X reuses it.

The seeded 80/10/10 split is drawn over the metadata listing, so an image's split never depends on
which other images failed to decode; empty, missing or unreadable images are skipped and counted.
Worker processes decode, and rows stream to disk, so Path-X (200k x 16,384 pixels) never sits in
memory.
"""
from __future__ import annotations

import functools
import multiprocessing
import os
import sys
import threading
from pathlib import Path

import numpy as np
from PIL import Image

from lra import errors
from lra.tasks.generators.pathfinder import generate as pathfinder_generator
from lra.tasks.generators.pathfinder.metadata import read_metadata
from lra.tasks.sources import downloads, pixels
from lra.tasks.contract.build import CacheWriter, Recipe, build
from lra.tasks.contract.cache import SPLITS
from lra.tasks.contract.fingerprint import sha256_of, stat_digest
from lra.base.progress import tracked
from lra.tasks.sources.release import RELEASE_URL, find_in_release
from lra.tasks.contract.spec import Task

DIFFICULTIES = {"easy": "curv_baseline", "intermediate": "curv_contour_length_9",
                "hard": "curv_contour_length_14"}
NUM_CLASSES = 2
FRACTIONS = (0.8, 0.1, 0.1)
_CHUNK = 256          # images per task handed to a worker
_POOL_MIN_IMAGES = 4096  # below this, starting workers costs more than it saves
_SHOWN_SKIPS = 20


def command(task: str) -> str:
  return (f"lra data prepare {task} --source PATH   (PATH = lra_release/, pathfinderN/ or its "
          f"curv_*/ folder; --option difficulty=easy|intermediate|hard)")


def _locate(source: Path, side: int, difficulty: str, task: str) -> Path:
  """The difficulty folder (holding imgs/ and metadata/) in any nesting of the release."""
  folder = DIFFICULTIES[difficulty]
  source = Path(source).expanduser()
  if source.name == f"pathfinder{side}":
    source = source / folder
  root = find_in_release(source, f"pathfinder{side}/{folder}",
                         f"the {side}x{side} {difficulty} Pathfinder set "
                         f"(pathfinder{side}/{folder}/ with imgs/ and metadata/)", command(task))
  if not (root / "metadata").is_dir():
    raise errors.NotFound(f"{root} has no metadata/ folder (expected metadata/<batch>.npy files "
                          f"beside imgs/).\nTry: {command(task)}")
  return root


def _metadata_files(root: Path) -> list[Path]:
  files = [p for p in (root / "metadata").iterdir() if p.is_file() and p.suffix == ".npy"]
  if not files:
    raise errors.NotFound(f"{root / 'metadata'} holds no <batch>.npy files.")
  return sorted(files, key=lambda p: (not p.stem.isdigit(), int(p.stem) if p.stem.isdigit() else 0,
                                      p.name))


def _listing(root: Path, metadata: list[Path], task: str) -> tuple[list[str], np.ndarray]:
  """Image paths and labels[N] from metadata rows `imgs/<batch> sample_<k>.png <k> <label> ...`:
  the release's text lines, or the original generator's `np.save` string arrays."""
  paths, labels = [], []
  for meta_file in metadata:
    try:
      rows = read_metadata(meta_file)
    except errors.BadValue as problem:  # junk or cut short: the user's to fetch or make again
      raise errors.BadValue(str(problem).rstrip(".") + downloads.refetch(
          meta_file, downloads.LRA_RELEASE, f"{command(task)} (or generate the files: lra data "
          "generate pathfinder)", inside=downloads.LRA_RELEASE)) from None
    for fields in rows:
      paths.append(str(root / fields[0] / fields[1]))
      labels.append(int(fields[3]))
  return paths, np.array(labels, dtype=np.int32)


def _decode_chunk(task: tuple[list[str], int]) -> tuple[np.ndarray, list[str | None]]:
  """pixels[n, side^2] and a skip reason (None when fine) for each path; runs in a worker."""
  paths, side = task
  out = np.zeros((len(paths), side * side), dtype=pixels.DTYPE)
  reasons: list[str | None] = []
  for row, path in zip(out, paths):
    try:
      if os.path.getsize(path) == 0:
        reasons.append("empty")
        continue
      with Image.open(path) as im:
        im = im if im.mode == "L" else im.convert("L")
        array = np.asarray(im)
    except FileNotFoundError:
      reasons.append("missing")
      continue
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
      reasons.append("unreadable")
      continue
    if array.shape != (side, side):
      reasons.append(f"size {array.shape[1]}x{array.shape[0]}")
      continue
    row[:] = array.reshape(-1)
    reasons.append(None)
  return out, reasons


def _pool_context() -> multiprocessing.context.BaseContext:
  """The start method of the decoding workers.

  fork while this process is single-threaded: cheap, and a caller's script needs no main guard.
  Otherwise forkserver, because a forked child would inherit locks held by other threads (JAX's).
  """
  methods = multiprocessing.get_all_start_methods()
  if "fork" in methods and threading.active_count() == 1 and "jax" not in sys.modules:
    return multiprocessing.get_context("fork")
  return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def _chunk_results(paths: list[str], side: int, workers: int):
  tasks = ((paths[i:i + _CHUNK], side) for i in range(0, len(paths), _CHUNK))
  if workers <= 1:
    yield from map(_decode_chunk, tasks)
    return
  with _pool_context().Pool(workers) as pool:
    yield from pool.imap(_decode_chunk, tasks)


def split_assignment(num_examples: int, seed: int) -> np.ndarray:
  """0/1/2 (train/val/test) per listed example: a seeded 80/10/10 draw."""
  num_val = num_test = int(num_examples * FRACTIONS[1])
  perm = np.random.default_rng(seed).permutation(num_examples)
  assign = np.zeros(num_examples, dtype=np.int8)
  assign[perm[num_examples - num_val - num_test:num_examples - num_test]] = 1
  assign[perm[num_examples - num_test:]] = 2
  return assign


def prepare_resolution(side: int, task: str, source: Path, out_dir: Path, *,
                       difficulty: str = "hard", split_seed: int = 0,
                       workers: int | None = None) -> dict:
  """Decodes one Pathfinder set of side x side images into the cache at out_dir.

  Args:
    side: 32 for Pathfinder, 128 for Path-X.
    task: the registry name, for meta.json and messages.
    source: the release root (either nesting), pathfinderN/, or its difficulty folder.
    out_dir: the cache folder.
    difficulty: easy (curv_baseline), intermediate (contour length 9) or hard (length 14, LRA).
    split_seed: seed of the 80/10/10 split.
    workers: decoding processes; None picks min(8, cores), and 1 for small sets.
  Returns:
    The meta; a no-op when metadata (sha256), images (size+mtime) and options are unchanged and
    the cached arrays are intact.
  """
  if difficulty not in DIFFICULTIES:
    raise errors.BadValue(f"Unknown difficulty '{difficulty}'. Valid: {', '.join(DIFFICULTIES)}.")
  seed = int(split_seed)
  root = _locate(source, side, difficulty, task)
  metadata = _metadata_files(root)
  paths, labels = _listing(root, metadata, task)
  if not paths:
    raise errors.BadValue(f"The metadata files in {root / 'metadata'} list no images.")
  checksums = sha256_of(root, metadata)
  checksums["imgs (listed in metadata)"] = stat_digest(root, paths)
  options = {"difficulty": difficulty, "split_seed": seed}
  recipe = Recipe(task=task, source_path=root, source_format=f"lra_release pathfinder{side}",
                  checksums=checksums, options=options,
                  tokenizer=f"grayscale PNG pixels 0-255 as tokens, row-major {side}x{side}")

  return build(out_dir, recipe, functools.partial(
      _write, task=task, root=root, paths=paths, labels=labels, side=side, seed=seed,
      difficulty=difficulty, workers=workers))


def _write(out: CacheWriter, *, task: str, root: Path, paths: list[str], labels: np.ndarray,
           side: int, seed: int, difficulty: str, workers: int | None) -> dict:
  """Decodes the listed images into the new cache; returns the rest of its meta."""
  if workers is None:
    workers = 1 if len(paths) < _POOL_MIN_IMAGES else min(8, os.cpu_count() or 1)
  assign = split_assignment(len(paths), seed)
  expected = np.bincount(assign, minlength=3)
  writers = [out.rows(split, "inputs", int(n), side * side, pixels.DTYPE)
             for split, n in zip(SPLITS, expected)]
  kept_labels: list[list[np.ndarray]] = [[] for _ in SPLITS]
  skipped: dict[str, int] = {}
  shown: list[str] = []
  start = 0
  for images, reasons in tracked(_chunk_results(paths, side, int(workers)), f"{task}: decoding",
                                 len(paths), "images", size=lambda chunk: len(chunk[1])):
    stop = start + len(reasons)
    ok = np.array([r is None for r in reasons])
    for i, reason in enumerate(reasons):
      if reason is None:
        continue
      if reason.startswith("size"):
        raise errors.BadValue(f"{paths[start + i]}: expected a {side}x{side} image, found "
                              f"{reason[5:]}. Is this pathfinder{side}?\nTry: {command(task)}")
      skipped[reason] = skipped.get(reason, 0) + 1
      if len(shown) < _SHOWN_SKIPS:
        shown.append(f"{Path(paths[start + i]).relative_to(root).as_posix()}: {reason}")
    for s, writer in enumerate(writers):
      keep = ok & (assign[start:stop] == s)
      writer.append(images[keep])
      kept_labels[s].append(labels[start:stop][keep])
    start = stop

  counts = {}
  for split, writer, parts in zip(SPLITS, writers, kept_labels):
    counts[split] = writer.close()
    out.write(split, "label", np.concatenate(parts))
  if not all(counts.values()):
    raise errors.BadValue(f"An empty split after skipping unreadable images: {counts}, skipped "
                          f"{skipped}. Is {root} complete?")
  print(f"{task}: prepared {counts} from {root}; skipped {sum(skipped.values())} "
        f"({skipped or 'none'}).", flush=True)
  return {"vocab_size": pixels.VOCAB_SIZE, "seq_len": side * side, "num_classes": NUM_CLASSES,
          "dual": False, "pad_id": None, "splits": counts, "difficulty": difficulty,
          "resolution": side, "split_seed": seed,
          "split": "seeded 80/10/10 over the metadata listing; skipped images leave their split",
          "num_listed": len(paths), "num_skipped": skipped, "skipped_examples": shown}


def prepare(source: Path, out_dir: Path, *, resolution: int = 32, difficulty: str = "hard",
            split_seed: int = 0, workers: int | None = None) -> dict:
  """Pathfinder (32x32 in LRA; `resolution` reads the release's other sizes, 64 to 256); see
  `prepare_resolution` for the other arguments."""
  return prepare_resolution(int(resolution), "pathfinder", source, out_dir,
                            difficulty=difficulty, split_seed=split_seed, workers=workers)


def generated_length(resolution: int, **_) -> int:
  """T of a generated image: its pixels."""
  return int(resolution) ** 2


TASK = Task(
    name="pathfinder",
    description="Pathfinder 32x32: are the two dots connected?",
    data_hint=(f"Bring the LRA release (nothing is downloaded; the official archive: "
               f"{RELEASE_URL}) or generate it: "
               "lra data generate pathfinder --out DIR --resolution 32; then run: "
               f"{command('pathfinder')}"),
    prepare=prepare,
    decode=pixels.decode,
    generate_small=functools.partial(pathfinder_generator.generate_small, resolution=32),
    generated_length=functools.partial(generated_length, resolution=32),
)
