"""`lra list` and `lra data generate|prepare|inspect|verify`."""
from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

import numpy as np

from lra import errors
from lra.configs.common import CPU_PRESETS, OWN_ARCHITECTURE_PRESETS, PRESETS, PUBLISHED_PRESETS
from lra.run import default_data_dir
from lra.models.mixers import MIXERS, describe, entry_points
from lra.tasks import TASKS, get_task
from lra.tasks.contract.cache import PreparedData, rebuild_command


def print_list() -> None:
  print("Tasks:")
  for name, task in TASKS.items():
    print(f"  {name:<16} {task.description}")
  print("Mixers:")
  departures = lra_row_departures()
  for name in MIXERS:
    print(f"  {name:<16} {describe(name)}")
    if departures.get(name):
      print(f"  {'':<16} defaults differ from its LRA row (--preset lra runs the row's): "
            f"{', '.join(departures[name])}")
  for name, ep in entry_points().items():  # installed packages' mixers (lra.mixers)
    print(f"  {name:<16} {ep.value} (installed{f' from {ep.dist.name}' if ep.dist else ''})")
  print("Presets (lra run TASK MIXER --preset P; --dry-run shows what one sets):")
  for preset in PRESETS + CPU_PRESETS + PUBLISHED_PRESETS:
    print(f"  {preset:<16} {PRESET_DESCRIPTIONS[preset]} [{', '.join(_tasks_with(preset))}]")


def lra_row_departures() -> dict[str, list[str]]:
  """Per mixer with a row of LRA's Table 1 in the tables, its default settings where they differ
  from the LRA code's that made the row (as the `lra` preset of ListOps sets them), as
  "key=default (LRA: value)"; docs/mixers.md says why each differs."""
  from lra.runs.config_loading import resolve_config
  from lra.configs.common import mixer_configs
  from lra.report.tables import load_published
  lra_rows = {row["mixer"] for row in load_published() if row["mixer"]
              and row["source"].startswith("LRA paper Table 1")}
  defaults, found = mixer_configs(), {}
  for mixer in sorted(lra_rows):
    lra = resolve_config("listops", mixer, "lra").mixers[mixer]
    found[mixer] = [f"{key}={value} (LRA: {lra[key]})" for key, value in
                    sorted(defaults[mixer].items()) if lra[key] != value]
  return found


# One line each for `lra list`; docs/protocol.md says where every value comes from.
PRESET_DESCRIPTIONS = {
    "paper": "the default: the Latte paper's settings (accelerator-sized, 6 layers)",
    "latte_code": "the Latte authors' code where it departs from the paper",
    "lra": "the original LRA code's settings",
    "smoke": "seconds: a few steps of a tiny model (checks that it runs, not that it learns)",
    "demo": "minutes on a CPU (ListOps with Latte: ~5 min on 2 cores, ~10 on one): a small "
            "model on small generated data",
    "laptop": "the LRA task's own data at full length (ListOps, Pathfinder) with a small model, "
              "trained on a CPU in 40 min to 4.5 h on 2 cores",
    "published": "S5's and Mega-Chunk's own published LRA runs: their blocks and optimizers",
    "laptop_published": "S5's or Mega-Chunk's own architecture on the laptop's data and budget",
    "squares": "NOT LRA's task: Pathfinder's easy set as 4x4 pixel squares (64 tokens), where "
               "mixers learn on one CPU core in 10-45 min",
    "squares_published": "S5's or Mega-Chunk's own block on the squares' data, size and budget",
}


def _tasks_with(preset: str) -> list[str]:
  """The tasks whose config accepts this preset."""
  from lra.runs.config_loading import load_config
  found = []
  mixer = "s5" if preset in OWN_ARCHITECTURE_PRESETS else "latte"  # they take only s5 and mega
  for task in TASKS:
    try:
      load_config(task, preset, mixer)
    except ValueError:
      continue
    found.append(task)
  return found


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


def dispatch(args: argparse.Namespace) -> int:
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
