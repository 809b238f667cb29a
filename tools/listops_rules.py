"""What do shallow rules score on ListOps, and does a trained model predict what they predict?

  lra data generate listops --out DIR          # or the release's listops-1000/
  lra eval results/runs/listops/latte/laptop_seed2 --predictions latte.npy
  python tools/listops_rules.py --data DIR --predictions latte=latte.npy [--json out.json]

Each rule is a lookup table fitted on the first --fit training examples: the most frequent
label given a key, scored on the test split. The keys: nothing (the majority class), the
outermost operator, and the outermost operator with the value it takes when its arguments deeper
than k levels are dropped (k = 1 keeps only its own digits). With the whole tree the "rule" is
the task's own evaluation, so it must score 100% (a check of the parser).

For each --predictions NAME=FILE (an [N] array of classes in the test split's order, from
`lra eval --predictions`): the model's accuracy (it must equal the one `lra eval` printed), how
often it predicts what each rule predicts, its accuracy where that rule is right and where it is
wrong, and, per outermost operator, its accuracy and how often it predicts each class. A model
right where a rule is right and wrong where it is wrong has learned little more than that rule.
"""
from __future__ import annotations

import argparse
import collections
import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from lra.tasks.generators.listops import evaluate

Tree = int | tuple  # a digit, or (operator, *arguments)
NUM_CLASSES = 10
RULE_DEPTHS = (1, 2, 3)


def parse(source: str) -> Tree:
  """One ListOps source line ("( ( [MAX 2 ) 9 ) ] )"; parentheses are noise) -> its tree."""
  stack: list[list] = [[]]
  for word in source.split():
    if word in ("(", ")"):
      continue
    if word.startswith("["):
      stack.append([word])
    elif word == "]":
      node = stack.pop()
      stack[-1].append(tuple(node))
    else:
      stack[-1].append(int(word))
  if len(stack) != 1 or len(stack[0]) != 1:
    raise ValueError(f"not one well-formed ListOps expression: {source[:80]!r}...")
  return stack[0][0]


def shallow_value(tree: Tree, depth: int | None) -> int | None:
  """The tree's value with arguments deeper than `depth` levels below the root dropped (None: the
  whole tree; an operator left with no arguments has no value)."""
  if isinstance(tree, int):
    return tree
  if depth == 0:
    return None
  operator, *arguments = tree
  values = [shallow_value(a, None if depth is None else depth - 1) for a in arguments]
  values = [v for v in values if v is not None]
  return evaluate(operator, values) if values else None


def read_split(folder: Path, split: str, limit: int | None = None) -> Iterator[tuple[Tree, int]]:
  """(tree, label) of each row of basic_<split>.tsv (LRA's release format, with its header)."""
  path = folder / f"basic_{split}.tsv"
  if not path.exists():
    raise FileNotFoundError(f"{path} not found: --data takes a folder with basic_train.tsv and "
                            "basic_test.tsv (`lra data generate listops --out DIR`, or the "
                            "release's listops-1000/)")
  with open(path) as f:
    next(f)
    for line_number, line in enumerate(itertools.islice(f, limit), start=2):
      try:
        source, label = line.rstrip("\n").split("\t")
        yield parse(source), int(label)
      except ValueError as error:
        raise ValueError(f"{path}:{line_number}: {error}") from None


RULES: dict[str, Callable[[Tree], object]] = {
    "majority class": lambda tree: None,
    "outermost operator": lambda tree: tree[0] if isinstance(tree, tuple) else None,
    **{f"outermost operator + its value to depth {k}":
       (lambda tree, k=k: (tree[0] if isinstance(tree, tuple) else None, shallow_value(tree, k)))
       for k in RULE_DEPTHS},
    "the whole tree": lambda tree: shallow_value(tree, None),
}


def rule_predictions(train: list[tuple[Tree, int]], test: list[tuple[Tree, int]]
                     ) -> dict[str, np.ndarray]:
  """Each rule's predicted class for every test example: [N] int per rule."""
  predictions = {}
  overall = collections.Counter(label for _, label in train).most_common(1)[0][0]
  for name, key in RULES.items():
    table: dict[object, collections.Counter] = collections.defaultdict(collections.Counter)
    for tree, label in train:
      table[key(tree)][label] += 1
    predictions[name] = np.array(
        [table[k].most_common(1)[0][0] if (k := key(tree)) in table else overall
         for tree, _ in test])
  return predictions


def report(rules: dict[str, np.ndarray], labels: np.ndarray, operators: np.ndarray,
           models: dict[str, np.ndarray]) -> dict:
  """Accuracies of the rules and models, each model's agreement with each rule, and each model's
  predictions per outermost operator (`operators`: [N] str)."""
  out = {"num_test": len(labels),
         "rules": {name: float(np.mean(p == labels)) for name, p in rules.items()},
         "models": {}}
  for model, predicted in models.items():
    if predicted.shape != labels.shape:
      raise ValueError(f"{model}: {predicted.shape[0]} predictions for {len(labels)} test "
                       "examples (predictions must cover the test split, in its order)")
    per_rule = {}
    for name, p in rules.items():
      right = p == labels
      per_rule[name] = {
          "agreement": float(np.mean(predicted == p)),
          "accuracy_where_rule_right": float(np.mean(predicted[right] == labels[right])),
          "accuracy_where_rule_wrong": (float(np.mean(predicted[~right] == labels[~right]))
                                        if (~right).any() else None)}
    by_operator = {}
    for operator in sorted(set(operators)):
      rows = operators == operator
      by_operator[operator] = {
          "count": int(rows.sum()),
          "accuracy": float(np.mean(predicted[rows] == labels[rows])),
          "predicted": np.bincount(predicted[rows], minlength=NUM_CLASSES).tolist(),
          "label": np.bincount(labels[rows], minlength=NUM_CLASSES).tolist()}
    out["models"][model] = {"accuracy": float(np.mean(predicted == labels)), "rules": per_rule,
                            "by_outermost_operator": by_operator}
  return out


def markdown(result: dict) -> str:
  lines = [f"Generated by tools/listops_rules.py on {result['data']}: rules fitted on the first "
           f"{result['fit']:,} training examples, scored on the {result['num_test']:,} test "
           "examples; agreement = share of test examples where the model predicts what the rule "
           "predicts.", "",
           "| rule | test accuracy |" + "".join(f" {m}: agreement |" for m in result["models"]),
           "|---|---:|" + "---:|" * len(result["models"])]
  for name, accuracy in result["rules"].items():
    agreements = "".join(f" {100 * m['rules'][name]['agreement']:.1f} |"
                         for m in result["models"].values())
    lines.append(f"| {name} | {100 * accuracy:.2f} |{agreements}")
  for model, m in result["models"].items():
    lines.append(f"\n{model}: test accuracy {100 * m['accuracy']:.2f}%; per outermost operator, "
                 "accuracy and the classes it predicts (share of that operator's examples):")
    for operator, o in m["by_outermost_operator"].items():
      shares = ", ".join(f"{c}: {100 * n / o['count']:.0f}%"
                         for c, n in enumerate(o["predicted"]) if n)
      lines.append(f"- {operator} ({o['count']} examples): {100 * o['accuracy']:.1f}%; "
                   f"predicts {shares}")
  return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--data", type=Path, required=True,
                      help="folder with basic_train.tsv and basic_test.tsv")
  parser.add_argument("--fit", type=int, default=20_000,
                      help="training examples the rules' tables are fitted on (default 20,000)")
  parser.add_argument("--predictions", action="append", default=[], metavar="NAME=FILE.npy")
  parser.add_argument("--json", type=Path)
  args = parser.parse_args(argv)
  train = list(read_split(args.data, "train", args.fit))
  test = list(read_split(args.data, "test"))
  labels = np.array([label for _, label in test])
  operators = np.array([tree[0] if isinstance(tree, tuple) else "digit" for tree, _ in test])
  models = {}
  for item in args.predictions:
    name, sep, path = item.partition("=")
    if not sep:
      parser.error(f"--predictions takes NAME=FILE.npy, got {item!r}")
    models[name] = np.load(path)
  data = str(args.data.expanduser().resolve()).replace(str(Path.home()), "~", 1)
  result = {"data": data, "fit": len(train),
            **report(rule_predictions(train, test), labels, operators, models)}
  print(markdown(result))
  if args.json:
    args.json.write_text(json.dumps(result, indent=1) + "\n")
  return result


if __name__ == "__main__":
  main()
