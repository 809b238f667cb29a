"""The LRA-size ListOps of `lra data generate listops` on many cores, the same files as on one.

The generator draws every tree from one Mersenne Twister stream (tasks/generators/listops.py), so
example k depends on every draw before it. For the default recipe (seed 0, 96,000 / 2,000 / 2,000
examples of 500-2,000 tokens, depth 10) `listops_states.json` holds the stream's state at every
CHUNK accepted examples, recorded once by `record` from the sequential run. A worker starts at one
state and generates its chunk with the sequential code's draws; it must end at the next recorded
state, so a chunk that came out differently (a duplicate of an earlier chunk's tree, which the
sequential run skips; another Python's `random`) is caught, and generation falls back to one core.

Measured on a 2-core CPU under other load (docs/accelerators.md): one core 93 s of CPU for the
100,000 examples; the chunks split that over the cores.
"""
from __future__ import annotations

import base64
import concurrent.futures
import json
import multiprocessing
import random
from pathlib import Path
from typing import Any

import numpy as np

from lra.tasks.generators import listops

STATES_FILE = Path(__file__).with_name("listops_states.json")
CHUNK = 5000
# The recipe `lra data generate listops` and the `laptop` and `paper` ListOps data use.
DEFAULT_RECIPE = {"num_examples": 100_000, "min_length": 500, "max_length": 2000,
                  "max_depth": 10, "max_args": 10, "seed": 0}


def _accepted(rng: random.Random, *, min_length: int, max_length: int, max_depth: int,
              max_args: int):
  """(source, label) of each tree within the length bounds, in draw order, duplicates included:
  the draws of listops.generate_examples, which then drops repeats."""
  while True:
    words: list[str] = []
    budget = [max_length - 1]
    try:  # pylint: disable=protected-access
      value = listops._tree(rng, 1, max_depth, max_args, budget, words)
    except listops._TooLong:  # pylint: disable=protected-access
      continue
    length = max_length - 1 - budget[0]
    if min_length < length < max_length:
      yield " ".join(words), value


def _encode(state: tuple) -> str:
  version, words, gauss = state
  assert version == 3 and gauss is None, state[::2]
  return base64.b64encode(np.asarray(words, np.uint32).tobytes()).decode()


def _decode(text: str) -> tuple:
  words = np.frombuffer(base64.b64decode(text), np.uint32)
  return (3, tuple(int(w) for w in words), None)


def record(recipe: dict[str, Any], chunk: int = CHUNK) -> dict[str, Any]:
  """Runs the sequential generator for `recipe` and returns its stream's states at every
  `chunk` accepted examples (the first: the seed's; the last: after the final example)."""
  params = {k: v for k, v in recipe.items() if k not in ("num_examples", "seed")}
  rng = random.Random(recipe["seed"])
  states, seen, count = [_encode(rng.getstate())], set(), 0
  for source, _ in _accepted(rng, **params):
    if source in seen:
      continue
    seen.add(source)
    count += 1
    if count % chunk == 0 or count == recipe["num_examples"]:
      states.append(_encode(rng.getstate()))
    if count == recipe["num_examples"]:
      break
  return {"recipe": recipe, "chunk": chunk, "states": states}


def _chunk(start: str, end: str, count: int, params: dict[str, Any]) -> list[tuple[str, int]]:
  """`count` examples from the stream at `start`, checked to end at `end` (else ValueError)."""
  rng = random.Random()
  rng.setstate(_decode(start))
  seen: set[str] = set()
  examples = []
  for source, value in _accepted(rng, **params):
    if source in seen:
      continue
    seen.add(source)
    examples.append((source, value))
    if len(examples) == count:
      break
  if _encode(rng.getstate()) != end:
    raise ValueError("the chunk ended at another state than the sequential run")
  return examples


def generate(num_examples: int, *, workers: int, states: dict[str, Any] | None = None,
             **params) -> list[tuple[str, int]] | None:
  """listops.generate_examples(num_examples, **params) over `workers` processes, when states are
  recorded for this recipe (default: listops_states.json); None when they are not, or when a
  chunk did not come out as the sequential run's (then generate on one core)."""
  recipe = {**{k: v for k, v in DEFAULT_RECIPE.items() if k != "num_examples"}, **params,
            "num_examples": num_examples}
  if states is None:
    states = json.loads(STATES_FILE.read_text()) if STATES_FILE.exists() else None
  if not states or states["recipe"] != recipe:
    return None
  chunk = states["chunk"]
  bounds = list(zip(states["states"], states["states"][1:]))
  counts = [min(chunk, num_examples - i * chunk) for i in range(len(bounds))]
  generator_params = {k: v for k, v in recipe.items() if k not in ("num_examples", "seed")}
  # Not fork: `lra data generate` runs in a process that has imported JAX, whose threads may
  # hold a lock a forked child inherits and waits on forever. The workers import this module
  # alone (numpy and the generator, no JAX).
  methods = multiprocessing.get_all_start_methods()
  context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
  with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
    parts = [pool.submit(_chunk, start, end, count, generator_params)
             for (start, end), count in zip(bounds, counts)]
    try:
      examples = [example for part in parts for example in part.result()]
    except ValueError:
      return None
  if len({source for source, _ in examples}) != len(examples):
    return None  # a tree repeated across chunks: the sequential run would have skipped it
  return examples


def main() -> None:
  """Records listops_states.json for the default recipe (a few minutes on one core)."""
  STATES_FILE.write_text(json.dumps(record(DEFAULT_RECIPE), indent=0) + "\n")
  print(f"wrote {STATES_FILE}")


if __name__ == "__main__":
  main()
