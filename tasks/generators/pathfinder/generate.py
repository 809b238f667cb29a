"""`lra data generate pathfinder`: Pathfinder / Path-X images in the LRA release layout, no
download.

Writes DIR/pathfinder<res>/<curv folder>/imgs/<batch>/sample_<k>.png, metadata/<batch>.npy (text
lines, as in the release) and the sidecar scenes/<batch>.npy (markers, target ends, distractors
placed, stroke peaks; see `stats.SCENE_DTYPE`). The images are those of Linsley et al.'s snakes
generator as LRA ran it (see `snakes`, `strokes`, `render`, `params`). Each batch is seeded from
(seed, resolution, contour length, batch), so the output is byte-identical for any number of
workers, and a re-run skips finished batches (an interrupted batch is redone from its seed, so a
killed run resumes to the same files). Costs, one core, numpy 2: ~2 ms per 32x32 image and ~30 ms
per 128x128 one (Path-X targets need ~300 attempts each, as in the original); ~200 MB per worker.
"""
from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import sys
from pathlib import Path

import numpy as np

from lra import errors
from lra.base.progress import Meter
from lra.tasks.generators.pathfinder.metadata import format_row, read_metadata
from lra.tasks.generators.pathfinder.params import DIFFICULTIES, RESOLUTIONS, Params, get_params
from lra.tasks.generators.pathfinder.render import encode_png, render
from lra.tasks.generators.pathfinder.snakes import make_scenes
from lra.tasks.generators.pathfinder.stats import SCENE_DTYPE, SCENES_DIR, compute_stats

IMAGES_PER_BATCH = 1000
MANIFEST = "generator.json"
STATS_FILE = "stats.json"
GENERATOR_VERSION = 2  # 2: the snakes generator's own growth, drawing and contrasts

__all__ = ["generate", "generate_small", "compute_stats", "generate_batch", "DIFFICULTIES",
           "RESOLUTIONS", "IMAGES_PER_BATCH"]


def _batch_rng(seed: int, params: Params, batch: int) -> np.random.Generator:
  return np.random.default_rng([seed, params.resolution, params.contour_length, batch])


def generate_batch(curv_dir: Path, params: Params, seed: int, batch: int, size: int) -> int:
  """Writes one batch (images, scenes sidecar, then metadata last); returns its image count.

  Labels are balanced within the batch (a seeded permutation of alternating 0/1); the original
  drew each label at random.
  """
  curv_dir = Path(curv_dir)
  rng = _batch_rng(seed, params, batch)
  labels = rng.permutation(np.arange(size) % 2)
  image_dir = curv_dir / "imgs" / str(batch)
  image_dir.mkdir(parents=True, exist_ok=True)
  scenes = make_scenes(params, rng, labels)
  rendered = render(params, scenes)
  for k, image in enumerate(rendered.images):
    (image_dir / f"sample_{k}.png").write_bytes(encode_png(image))
  sidecar = np.zeros(size, dtype=SCENE_DTYPE)
  sidecar["markers"], sidecar["origins"] = scenes.markers, scenes.origins
  sidecar["terminals"], sidecar["num_distractors"] = scenes.terminals, scenes.num_distractors
  sidecar["target_peak"] = rendered.target_peak
  sidecar["distractor_peak"] = rendered.distractor_peak
  lines = [format_row(batch, k, label, params.metadata_fields(int(margin)))
           for k, (label, margin) in enumerate(zip(labels.tolist(), scenes.margins.tolist()))]
  for folder, name, payload in ((SCENES_DIR, f"{batch}.npy", sidecar),
                                ("metadata", f"{batch}.npy", "\n".join(lines) + "\n")):
    path = curv_dir / folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
      if isinstance(payload, str):
        f.write(payload.encode())
      else:
        np.save(f, payload)
    os.replace(tmp, path)  # metadata lands last: its presence marks the batch finished
  return size


def _job(args: tuple) -> int:
  return generate_batch(*args)


def _batch_done(curv_dir: Path, batch: int, size: int) -> bool:
  path = curv_dir / "metadata" / f"{batch}.npy"
  if not path.exists():
    return False
  try:
    return len(read_metadata(path)) == size
  except ValueError:
    return False


def _check_manifest(curv_dir: Path, manifest: dict) -> None:
  path = curv_dir / MANIFEST
  manifest = json.loads(json.dumps(manifest))  # as it reads back (tuples become lists)
  if path.exists():
    old = json.loads(path.read_text())
    if old != manifest:
      raise errors.BadValue(
          f"{curv_dir} was generated with different settings ({path}: seed {old.get('seed')}, "
          f"generator version {old.get('version')}); resuming would mix two data sets.\n"
          f"Re-run with --seed {old.get('seed')}, or pick a fresh --out directory.")
  else:
    curv_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def generate(out_dir: Path, resolution: int = 32, difficulty: str = "hard",
             num_images: int = 200_000, seed: int = 0, workers: int = 1, stats: bool = False,
             progress: bool = True, *, images_per_batch: int = IMAGES_PER_BATCH) -> Path:
  """Generates a Pathfinder set in the release layout and returns its `curv_*` folder.

  Args:
    out_dir: the root; images go to out_dir/pathfinder<resolution>/<curv folder>/.
    resolution: 32, 64, 128 (Path-X) or 256.
    difficulty: easy (curv_baseline, 6 paddles), intermediate (curv_contour_length_9) or hard
      (curv_contour_length_14).
    num_images: total images; the last batch is smaller when this is not a multiple of
      images_per_batch.
    seed: batch b is drawn from (seed, resolution, contour length, b) alone.
    workers: processes; the output does not depend on it.
    stats: also write stats.json (see `compute_stats`) beside metadata/.
    progress: report images done, images/s and time left on stderr.
    images_per_batch: 1000 in the release; smaller only for tests.
  Raises:
    ValueError: unknown resolution or difficulty, or out_dir holds a set made with other
      settings.
  """
  params = get_params(resolution, difficulty)
  if num_images < 1 or workers < 1 or images_per_batch < 1:
    raise errors.BadValue("num_images, workers and images_per_batch must be >= 1, found "
                          f"{num_images}, {workers}, {images_per_batch}.")
  curv_dir = Path(out_dir).expanduser() / f"pathfinder{resolution}" / params.folder
  _check_manifest(curv_dir, {"version": GENERATOR_VERSION, "seed": seed,
                             "images_per_batch": images_per_batch,
                             "params": dataclasses.asdict(params)})
  batches = [(b, min(images_per_batch, num_images - b * images_per_batch))
             for b in range(-(-num_images // images_per_batch))]
  todo = [(curv_dir, params, seed, b, n) for b, n in batches if not _batch_done(curv_dir, b, n)]
  if todo and progress and len(todo) < len(batches):
    print(f"Resuming: {len(batches) - len(todo)} of {len(batches)} batches already done.",
          file=sys.stderr)
  with Meter(f"pathfinder{resolution}/{params.folder}: generating", sum(job[-1] for job in todo),
             "images", enabled=progress) as meter:
    if workers == 1 or len(todo) <= 1:
      for job in todo:
        meter.advance(_job(job))
    else:
      # spawn: forking a process that has started JAX's threads is unsafe. Batches are counted as
      # the workers finish them, in any order.
      with multiprocessing.get_context("spawn").Pool(min(workers, len(todo))) as pool:
        for images in pool.imap_unordered(_job, todo):
          meter.advance(images)
  if stats:
    report = compute_stats(curv_dir, marker_radius=params.marker_radius)
    (curv_dir / STATS_FILE).write_text(json.dumps(report, indent=2) + "\n")
  return curv_dir


def generate_small(raw_dir: Path, *, resolution: int = 32, difficulty: str = "hard",
                   num_images: int = 2000, seed: int = 0) -> dict:
  """A set for the presets that make their own data (`Task.generate_small`).

  Returns the options the reader needs to find what was written (its resolution and
  difficulty), so a generator setting never disagrees with the folder the preparation reads.
  Sets of more than a few batches are made on every core (the images do not depend on it) and
  report their progress: LRA's 200,000 images take minutes.
  """
  batches = -(-num_images // IMAGES_PER_BATCH)
  generate(raw_dir, resolution=resolution, difficulty=difficulty, num_images=num_images,
           seed=seed, workers=max(1, min(os.cpu_count() or 1, batches)) if batches > 4 else 1,
           progress=batches > 4)
  return {"resolution": resolution, "difficulty": difficulty}
