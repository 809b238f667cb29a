"""Times `lra data prepare` per task on stand-in sources in the real formats (no real data).

  python tools/prepare_throughput.py --out /tmp/prep_bench [--scale 0.2] [--tasks text,image]

For each task it writes a source in the release format (aclImdb/ folder, new_aan_pairs TSVs,
cifar-10-batches-py pickles, generated Pathfinder/Path-X PNGs), then runs `lra data prepare` in a
child process and reports examples/s and that child's peak RSS. Sizes follow the real sets scaled
by --scale (text reviews ~1.3 kB, AAN documents ~5 kB, as in the release), except Path-X, which
prepares --pathx-images 128x128 images (its point is memory: the output is streamed to a
memory-mapped file, so the peak must not grow with the number of images). Results go to
OUT/prepare_throughput.json.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
WORDS = ("the film plot actor naïve café great awful scene ending music <br /> and but "
         "however director story").split()


def write_imdb(root: Path, per_split: int, rng: np.random.Generator) -> Path:
  for split in ("train", "test"):
    for label, name in enumerate(("neg", "pos")):
      folder = root / "aclImdb" / split / name
      folder.mkdir(parents=True, exist_ok=True)
      for i in range(per_split // 2):
        body = " ".join(rng.choice(WORDS, size=int(rng.integers(40, 400))))
        (folder / f"{i}_{1 + 9 * label}.txt").write_text(body, encoding="utf-8")
  return root / "aclImdb"


def write_aan(root: Path, sizes: dict[str, int], rng: np.random.Generator) -> Path:
  folder = root / "lra_release" / "tsv_data"
  folder.mkdir(parents=True, exist_ok=True)
  for split, n in sizes.items():
    with open(folder / f"new_aan_pairs.{split}.tsv", "w", encoding="utf-8") as f:
      for i in range(n):
        docs = [" ".join(rng.choice(WORDS, size=int(rng.integers(300, 1200)))) for _ in range(2)]
        f.write(f"{float(i % 2)}\tP{i}a\tP{i}b\t{docs[0]}\t{docs[1]}\n")
  return root / "lra_release"


def write_cifar(root: Path, num_train: int, num_test: int, rng: np.random.Generator) -> Path:
  folder = root / "cifar-10-batches-py"
  folder.mkdir(parents=True, exist_ok=True)
  per_batch = num_train // 5
  for name, n in [(f"data_batch_{i}", per_batch) for i in range(1, 6)] + [("test_batch",
                                                                               num_test)]:
    batch = {b"batch_label": name.encode(), b"labels": rng.integers(0, 10, n).tolist(),
             b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
             b"filenames": [f"{k}.png".encode() for k in range(n)]}
    (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
  return folder


def write_pathfinder(root: Path, resolution: int, num_images: int) -> Path:
  from lra.tasks.generators.pathfinder import generate as pathfinder_generator
  pathfinder_generator.generate(root, resolution=resolution, difficulty="hard",
                                num_images=num_images, seed=0, workers=2, progress=False)
  return root


def prepare(task: str, source: Path, cache: Path) -> dict:
  """Runs `lra data prepare` in a child; returns its wall time and peak RSS."""
  command = [sys.executable, "-m", "lra", "--data-dir", str(cache), "data", "prepare", task,
             "--source", str(source)]
  start = time.perf_counter()
  child = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL)
  _, status, usage = os.wait4(child.pid, 0)  # this child's own peak RSS (KiB on Linux)
  child.returncode = os.waitstatus_to_exitcode(status)
  seconds = time.perf_counter() - start
  if child.returncode:
    raise SystemExit(f"lra data prepare {task} failed (exit {child.returncode})")
  meta = json.loads((cache / task / "meta.json").read_text())
  return {"task": task, "examples": sum(meta["splits"].values()), "seconds": round(seconds, 2),
          "examples_per_s": round(sum(meta["splits"].values()) / seconds, 1),
          "peak_rss_mib": round(usage.ru_maxrss / 1024)}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", type=Path, required=True)
  parser.add_argument("--scale", type=float, default=0.2, help="fraction of each real set's size")
  parser.add_argument("--pathx-images", type=int, default=3000)
  parser.add_argument("--tasks", default="text,retrieval,image,pathfinder,pathx")
  args = parser.parse_args()
  rng = np.random.default_rng(0)
  sources = {
      "text": lambda: write_imdb(args.out / "text_src", int(25_000 * args.scale), rng),
      "retrieval": lambda: write_aan(args.out / "retrieval_src",
                                     {"train": int(147_086 * args.scale),
                                      "eval": int(18_090 * args.scale),
                                      "test": int(17_437 * args.scale)}, rng),
      "image": lambda: write_cifar(args.out / "image_src", int(50_000 * args.scale),
                                   int(10_000 * args.scale), rng),
      "pathfinder": lambda: write_pathfinder(args.out / "pathfinder_src", 32,
                                             int(200_000 * args.scale)),
      "pathx": lambda: write_pathfinder(args.out / "pathx_src", 128, args.pathx_images),
  }
  results = []
  for task in args.tasks.split(","):
    source = sources[task]()
    result = prepare(task, source, args.out / "cache")
    results.append(result)
    print(json.dumps(result), flush=True)
  (args.out / "prepare_throughput.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
  main()
