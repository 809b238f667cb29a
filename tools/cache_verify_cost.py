"""What checking a prepared cache costs, on a stand-in cache of Path-X's size (3.3 GB of uint8).

  python tools/cache_verify_cost.py --out /tmp/verify_cost [--train 160000 --width 16384]

Writes a cache of random pixels (train/val/test = 80/10/10% of --train / 0.8 rows) through the
same contract as `lra data prepare` (tasks.contract.build), then times, with the page cache
dropped for the cache's files (cold) and again with them cached (warm):
  open_unchecked  np.load of every array memory-mapped (what opening cost before checks existed)
  open_checked    PreparedData: meta.json + the cheap check of every array (size, header, sample)
  full_verify     sha256 of every byte (`lra data verify`, and `lra data prepare` when current)
  read_all        reading every array once, in order (the I/O of one epoch and one evaluation)
Each is reported as wall and CPU seconds. Prints one JSON object and writes it to
OUT/verify_cost.json; deletes the cache unless --keep.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from lra.tasks.contract.build import CacheWriter, Recipe, build
from lra.tasks.contract.cache import PreparedData

_CHUNK_ROWS = 2048


def _write(out: CacheWriter, sizes: dict[str, int], width: int) -> dict:
  rng = np.random.default_rng(0)
  block = rng.integers(0, 256, size=(_CHUNK_ROWS, width), dtype=np.uint8)
  for split, rows in sizes.items():
    writer = out.rows(split, "inputs", rows, width, np.uint8)
    for start in range(0, rows, _CHUNK_ROWS):
      block[:, 0] = start % 256  # rows differ from chunk to chunk
      writer.append(block[:min(_CHUNK_ROWS, rows - start)])
    writer.close()
    out.write(split, "label", rng.integers(0, 2, size=rows, dtype=np.int32))
  return {"vocab_size": 256, "seq_len": width, "num_classes": 2, "dual": False, "pad_id": None,
          "splits": sizes}


def _drop_page_cache(cache: Path) -> None:
  for path in cache.iterdir():
    fd = os.open(path, os.O_RDONLY)
    try:
      os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # clean pages only: the files are synced
    finally:
      os.close(fd)


def _timed(fn) -> tuple[float, float]:
  """(wall, CPU) seconds: CPU time is what a busy shared machine changes least."""
  wall, cpu = time.perf_counter(), time.process_time()
  fn()
  return round(time.perf_counter() - wall, 4), round(time.process_time() - cpu, 4)


def _read_all(cache: Path) -> None:
  for path in sorted(cache.glob("*.npy")):
    array = np.load(path, mmap_mode="r")
    for start in range(0, len(array), 8192):
      np.asarray(array[start:start + 8192]).sum(dtype=np.int64)  # touch every page


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", type=Path, required=True)
  parser.add_argument("--train", type=int, default=160_000, help="training rows (Path-X: 160k)")
  parser.add_argument("--width", type=int, default=16_384, help="tokens per row (Path-X: 16,384)")
  parser.add_argument("--keep", action="store_true")
  args = parser.parse_args()
  sizes = {"train": args.train, "val": args.train // 8, "test": args.train // 8}
  cache = args.out / "cache"
  recipe = Recipe(task="pathx", source_path=args.out, source_format="stand-in",
                  checksums={}, options={"train": args.train, "width": args.width}, tokenizer="")
  start = time.perf_counter()
  build(cache, recipe, lambda out: _write(out, sizes, args.width))
  result = {"bytes": sum(p.stat().st_size for p in cache.iterdir()),
            "build_s": round(time.perf_counter() - start, 2), "load_1min": os.getloadavg()[0]}
  steps = {
      "open_unchecked": lambda: [np.load(p, mmap_mode="r") for p in cache.glob("*.npy")],
      "open_checked": lambda: PreparedData(cache),
      "full_verify": lambda: PreparedData(cache).verify(),
      "read_all": lambda: _read_all(cache),
  }
  for temperature in ("cold", "warm"):
    for name, step in steps.items():
      if temperature == "cold":
        _drop_page_cache(cache)
      result[f"{name}_{temperature}_s"], result[f"{name}_{temperature}_cpu_s"] = _timed(step)
  result["load_1min_after"] = os.getloadavg()[0]
  print(json.dumps(result), flush=True)
  (args.out / "verify_cost.json").write_text(json.dumps(result, indent=2) + "\n")
  if not args.keep:
    shutil.rmtree(cache)


if __name__ == "__main__":
  main()
