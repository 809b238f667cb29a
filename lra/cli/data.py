"""`lra data generate|prepare|inspect|verify`: LRA-format files made here, the prepared cache and
what the model sees of it."""
from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

import numpy as np

from lra import errors
from lra.cli.common import add_command
from lra.runs.config_loading import default_data_dir
from lra.tasks import get_task
from lra.tasks.contract.cache import PreparedData, rebuild_command


def add_parser(commands) -> None:
  data = add_command(commands, "data", "generate, prepare and inspect data")
  data.set_defaults(handler=main)
  data_sub = data.add_subparsers(dest="data_command", required=True)
  gen = add_command(data_sub, "generate", "write LRA-format files (no download)")
  gen_sub = gen.add_subparsers(dest="generator", required=True)
  listops = add_command(
      gen_sub, "listops", "basic_{train,val,test}.tsv like the release",
      description="ListOps as LRA's generator makes it (its code's data/listops.py, seeded here): "
      "each default is LRA's; docs/data.md describes the trees.")
  listops.add_argument("--out", type=Path, required=True,
                       help="the folder for basic_{train,val,test}.tsv (then `lra data prepare "
                       "listops --source OUT`)")
  listops.add_argument("--num-train", type=int, default=96_000,
                       help="training expressions (default %(default)s, LRA's)")
  listops.add_argument("--num-val", type=int, default=2_000,
                       help="validation expressions (default %(default)s, LRA's)")
  listops.add_argument("--num-test", type=int, default=2_000,
                       help="test expressions (default %(default)s, LRA's)")
  listops.add_argument("--min-length", type=int, default=500,
                       help="keep expressions longer than this many tokens (operators, closers "
                       "and digits; default %(default)s, LRA's)")
  listops.add_argument("--max-length", type=int, default=2000,
                       help="keep expressions shorter than this many tokens (default "
                       "%(default)s, LRA's; prepare pads to the longest, rounded up to 16)")
  listops.add_argument("--max-depth", type=int, default=10,
                       help="the deepest nesting: a node above it is a digit with probability "
                       "0.75, else an operator; at it, always a digit (default %(default)s, "
                       "LRA's)")
  listops.add_argument("--max-args", type=int, default=10,
                       help="an operator (MIN, MAX, MED, SM) takes 2 to this many arguments, "
                       "uniformly (default %(default)s, LRA's)")
  listops.add_argument("--seed", dest="generator_seed", type=int, default=0,
                       help="the generator's seed (default 0: the suite's files)")
  listops.add_argument("--workers", type=int, default=1, help="processes (default 1): the same "
                       "files, faster, for the default recipe (its stream states are recorded)")
  pathfinder = add_command(
      gen_sub, "pathfinder",
      "pathfinder<res>/curv_*/imgs + metadata like the release (Path-X = 128)")
  pathfinder.add_argument("--out", type=Path, required=True,
                          help="the root: images go to OUT/pathfinder<RESOLUTION>/<curv folder>/ "
                          "(then `lra data prepare pathfinder --source OUT`)")
  pathfinder.add_argument("--resolution", type=int, default=32, choices=(32, 64, 128, 256),
                          help="image side in pixels: 32 (default, the pathfinder task), 128 "
                          "(Path-X), or 64 and 256")
  pathfinder.add_argument("--difficulty", default="hard", choices=("easy", "intermediate", "hard"),
                          help="contour length 6 (curv_baseline), 9 or 14 (default, LRA)")
  pathfinder.add_argument("--num-images", type=int, default=200_000,
                          help="images in all, half of them connected; prepare splits them "
                          "80/10/10 (default %(default)s, the release's per resolution and "
                          "difficulty)")
  pathfinder.add_argument("--seed", dest="generator_seed", type=int, default=0,
                          help="the generator's seed (default 0: the suite's files)")
  pathfinder.add_argument("--workers", type=int, default=1,
                          help="processes (default 1; the same output for any)")
  pathfinder.add_argument("--stats", action="store_true",
                          help="also write stats.json (distractors placed, ink, halo, components, "
                               "markers, marker-distance leak; docs/pathfinder.md compares them)")

  prep = add_command(
      data_sub, "prepare", "raw release / archive -> cache",
      description="Raw release / archive -> cache: reads the files you downloaded (nothing is "
      "downloaded here) into arrays under --data-dir, once. docs/data.md lists each archive, "
      "its official URL, size and SHA-256.")
  prep.add_argument("task", help="listops, text, retrieval, image, pathfinder or pathx (lra list)")
  prep.add_argument("--source", type=Path, required=True, metavar="PATH",
                    help="what you downloaded or generated: listops, retrieval, pathfinder, "
                    "pathx: the unpacked LRA release (lra_release/, either nesting, or the task's "
                    "own folder; listops, pathfinder: also the folder `lra data generate` wrote); "
                    "text: aclImdb/, "
                    "aclImdb_v1.tar.gz or a TFDS data dir; image: cifar-10-batches-py/, "
                    "cifar-10-python.tar.gz or a TFDS data dir")
  prep.add_argument("--data-dir", type=Path, help="where caches go (default $LRA_DATA_DIR, "
                    "else ~/.cache/lra); runs read the same folder")
  prep.add_argument("--cache-name", help="folder under --data-dir (default: the task name)")
  prep.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="task-specific prepare option (repeatable)")

  insp = add_command(data_sub, "inspect", "what the model sees, decoded")
  insp.add_argument("task")
  insp.add_argument("--split", default="train")
  which = insp.add_mutually_exclusive_group()
  which.add_argument("--index", type=int)
  which.add_argument("--all", action="store_true")
  insp.add_argument("--json", action="store_true", help="one JSON object per line")
  insp.add_argument("--data-dir", type=Path)
  insp.add_argument("--preset", default="paper", help="whose cache to read (demo/smoke: "
                    "their generated data)")
  insp.add_argument("--cache-name")

  check = add_command(data_sub, "verify", "sha256 of every cached array against meta.json "
                      "(loading checks sizes and samples only); exit 1 if any differs")
  check.add_argument("task")
  check.add_argument("--data-dir", type=Path)
  check.add_argument("--preset", default="paper", help="whose cache to check (demo/smoke: "
                     "their generated data)")
  check.add_argument("--cache-name")


def _parse_options(items: list[str]) -> dict:
  options = {}
  for item in items:
    key, sep, text = item.partition("=")
    if not sep:
      raise errors.BadValue(f"--option {item}: expected KEY=VALUE")
    try:
      options[key] = ast.literal_eval(text)
    except (ValueError, SyntaxError):
      options[key] = text
  return options


def _cache_dir(args: argparse.Namespace) -> Path:
  data_dir = args.data_dir or default_data_dir()
  if args.cache_name is None and getattr(args, "preset", None):
    from lra.runs.config_loading import data_cache_dir, load_config
    return data_cache_dir(load_config(args.task, args.preset), data_dir)
  return data_dir / (args.cache_name or args.task)


def main(args: argparse.Namespace, overrides: list[str]) -> int:
  if args.data_command == "generate":
    return generate(args)
  if args.data_command == "prepare":
    task = get_task(args.task)
    out = _cache_dir(args)
    meta = task.prepare_cache(args.source, out, **_parse_options(args.option))
    print(f"{args.task}: cached at {out}: " +
          ", ".join(f"{k} {v}" for k, v in meta["splits"].items()) +
          f"; seq_len {meta['seq_len']}, vocab {meta['vocab_size']}")
    return 0
  if args.data_command == "inspect":
    return inspect(args)
  if args.data_command == "verify":
    return verify(args)
  raise AssertionError(args.data_command)


def verify(args: argparse.Namespace) -> int:
  """Full sha256 of every array against meta.json; 1 when any differs (loading checks less)."""
  data = PreparedData(_cache_dir(args), hint=get_task(args.task).data_hint)
  problems = data.verify()
  for name, problem in problems.items():
    print(f"  {name}: {problem or 'ok'}")
  damaged = [name for name, problem in problems.items() if problem]
  if damaged:
    print(f"lra data verify: {len(damaged)} damaged array(s) in {data.cache_dir}. Rebuild the "
          f"cache: {rebuild_command(data.cache_dir, data.meta)}", file=sys.stderr)
    return 1
  print(f"{args.task}: {data.cache_dir}: all {len(problems)} arrays match meta.json (sha256).")
  return 0


def generate(args: argparse.Namespace) -> int:
  if args.generator == "listops":
    from lra.tasks.generators import listops as listops_generator
    out = listops_generator.write_release(
        args.out, num_train=args.num_train, num_val=args.num_val, num_test=args.num_test,
        min_length=args.min_length, max_length=args.max_length, max_depth=args.max_depth,
        max_args=args.max_args, seed=args.generator_seed, progress=True, workers=args.workers)
    print(f"listops: wrote {out}/basic_{{train,val,test}}.tsv\n"
          f"next: lra data prepare listops --source {out}")
    return 0
  if args.generator == "pathfinder":
    from lra.tasks.generators.pathfinder import generate as pathfinder_generator
    curv = pathfinder_generator.generate(
        args.out, resolution=args.resolution, difficulty=args.difficulty,
        num_images=args.num_images, seed=args.generator_seed, workers=args.workers,
        stats=args.stats)
    task = "pathx" if args.resolution == 128 else "pathfinder"
    print(f"pathfinder: wrote {curv}/imgs and metadata" +
          (f", stats in {curv / pathfinder_generator.STATS_FILE}" if args.stats else ""))
    if args.resolution in (32, 128):
      print(f"next: lra data prepare {task} --source {args.out} "
            f"--option difficulty={args.difficulty}")
    return 0
  raise AssertionError(args.generator)


def _example(data: PreparedData, arrays: dict, index: int, decode) -> dict:
  record = {"index": index, "label": int(arrays["label"][index])}
  for key in data.input_keys:
    suffix = key[len("inputs"):]
    tokens = np.asarray(arrays[key][index])
    length = (len(tokens) if data.spec.pad_id is None
              else int(np.count_nonzero(tokens != data.spec.pad_id)))
    record[f"tokens{suffix}"] = tokens[:length].tolist()
    record[f"length{suffix}"] = length
    if decode is not None:
      record[f"text{suffix}"] = decode(tokens)
  return record


def inspect(args: argparse.Namespace) -> int:
  task = get_task(args.task)
  data = PreparedData(_cache_dir(args), hint=task.data_hint)
  if args.index is None and not args.all:
    summary = {"task": args.task, "cache": str(data.cache_dir), "splits": data.meta["splits"],
               "vocab_size": data.spec.vocab_size, "seq_len": data.spec.seq_len,
               "num_classes": data.spec.num_classes, "dual": data.spec.dual,
               "tokenizer": data.meta.get("tokenizer")}
    print(json.dumps(summary, indent=None if args.json else 2))
    return 0
  arrays = data.split(args.split)
  n = len(arrays["label"])
  indices = range(n) if args.all else [args.index]
  for index in indices:
    if not 0 <= index < n:
      raise errors.BadValue(f"--index {index} is out of range: split '{args.split}' has {n} "
                            "examples")
    record = _example(data, arrays, index, task.decode)
    if args.json:
      print(json.dumps(record))
    else:
      print(f"[{args.split} {index}] label {record['label']}")
      for key, value in record.items():
        if key.startswith("text") or key.startswith("length"):
          print(f"  {key}: {value}")
  return 0
