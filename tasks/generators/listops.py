"""Seeded ListOps generator following LRA's own (google-research/long-range-arena, data/listops.py,
which was unseeded), writing the release's TSV format.

A node at depth d < max_depth is a leaf digit with probability 0.75, else an operator (MIN, MAX,
MED, SM uniform) with 2..max_args arguments at depth d+1; trees are kept when
min_length < length < max_length (operators, closers and digits counted), duplicates dropped.
"""
from __future__ import annotations

import random
import statistics
from pathlib import Path

from lra import errors
from lra.tasks.contract.atomic import replacing
from lra.base.progress import Meter

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
LEAF_PROBABILITY = 0.75
SPLITS = ("train", "val", "test")


class _TooLong(Exception):
  pass


def evaluate(operator: str, args: list[int]) -> int:
  """The value of one operator node (MED of an even count = the mean of the middle two,
  truncated)."""
  if operator == "[MIN":
    return min(args)
  if operator == "[MAX":
    return max(args)
  if operator == "[MED":
    return int(statistics.median(args))
  if operator == "[SM":
    return sum(args) % 10
  raise ValueError(f"unknown ListOps operator {operator!r}")


def _tree(rng: random.Random, depth: int, max_depth: int, max_args: int, budget: list[int],
          out: list[str]) -> int:
  """Appends one node's source words to `out` and returns its value.

  `budget[0]` counts the tokens still allowed; exceeding it aborts a tree that would be rejected
  anyway, which keeps generation fast without changing which trees are accepted.
  """
  if depth >= max_depth or rng.random() < LEAF_PROBABILITY:
    value = rng.randrange(10)
    budget[0] -= 1
    out.append(str(value))
    return value
  operator = OPERATORS[rng.randrange(len(OPERATORS))]
  num_args = rng.randint(2, max_args)
  budget[0] -= 2  # the operator and its closer
  if budget[0] < 0:
    raise _TooLong
  # The release nests one "(" per argument plus one for the closer: ( ( ( [MAX 2 ) 9 ) ] )
  out.append("( " * num_args + "( " + operator)
  args = []
  for _ in range(num_args):
    args.append(_tree(rng, depth + 1, max_depth, max_args, budget, out))
    if budget[0] < 0:
      raise _TooLong
    out.append(")")
  out.append("] )")
  return evaluate(operator, args)


def generate_examples(num_examples: int, *, min_length: int = 500, max_length: int = 2000,
                      max_depth: int = 10, max_args: int = 10, seed: int = 0,
                      progress: bool = False) -> list[tuple[str, int]]:
  """Unique (source, label) pairs with min_length < length < max_length, in generation order."""
  rng = random.Random(seed)
  seen: set[str] = set()
  examples: list[tuple[str, int]] = []
  with Meter("listops: generating", num_examples, "examples", enabled=progress) as meter:
    while len(examples) < num_examples:
      words: list[str] = []
      budget = [max_length - 1]
      try:
        value = _tree(rng, 1, max_depth, max_args, budget, words)
      except _TooLong:
        continue
      length = max_length - 1 - budget[0]
      if not min_length < length < max_length:
        continue
      source = " ".join(words)
      if source in seen:
        continue
      seen.add(source)
      examples.append((source, value))
      meter.advance()
  return examples


def write_release(out_dir: Path, *, num_train: int = 96_000, num_val: int = 2_000,
                  num_test: int = 2_000, progress: bool = False, workers: int = 1,
                  **params) -> Path:
  """Writes basic_{train,val,test}.tsv (header `Source<TAB>Target`), split in generation order.

  `workers` > 1 generates the same files on that many processes where the recipe's stream states
  are recorded (tasks/generators/listops_states.py: the default recipe), else on one.

  The folder is replaced whole (tasks.contract.atomic), so an interrupted run leaves the previous
  files or none, never a mix of two seeds; it must therefore hold nothing but these files.
  """
  out_dir = Path(out_dir).expanduser()
  names = {f"basic_{split}.tsv" for split in SPLITS}
  others = sorted(p.name for p in out_dir.iterdir() if p.name not in names) if (
      out_dir.is_dir()) else []
  if others:
    raise errors.Conflict(f"{out_dir} holds other files ({', '.join(others[:3])}); the generator "
                          f"replaces the whole folder. Pass a new or empty --out folder.")
  counts = {"train": num_train, "val": num_val, "test": num_test}
  examples = None
  if workers > 1:
    from lra.tasks.generators import listops_states  # pylint: disable=import-outside-toplevel
    examples = listops_states.generate(sum(counts.values()), workers=workers, **params)
  if examples is None:
    examples = generate_examples(sum(counts.values()), progress=progress, **params)
  with replacing(out_dir) as folder:
    start = 0
    for split in SPLITS:
      rows = examples[start:start + counts[split]]
      start += counts[split]
      with open(folder / f"basic_{split}.tsv", "w") as f:
        f.write("Source\tTarget\n")
        f.writelines(f"{source}\t{label}\n" for source, label in rows)
  return out_dir
