"""ListOps: generator labels, release parsing, vocabulary stability, clear errors."""
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from lra.tasks.generators import listops as listops_generator
from lra.tasks.sources import listops
from lra.tasks.contract.cache import DataMissingError, PreparedData


def _evaluate_source(source: str) -> int:
  """An independent evaluator working on the parenthesised release string itself."""
  words = source.split()
  stack = []  # each frame: [operator, args]
  result = None
  for word in words:
    if word == "(" or word == ")":
      continue
    if word.startswith("["):
      stack.append([word, []])
    elif word == "]":
      op, args = stack.pop()
      value = {"[MIN": min, "[MAX": max,
               "[MED": lambda a: int(np.median(a)),
               "[SM": lambda a: sum(a) % 10}[op](args)
      if stack:
        stack[-1][1].append(value)
      else:
        result = value
    else:
      if stack:
        stack[-1][1].append(int(word))
      else:
        result = int(word)
  return result


def test_generator_labels_lengths_uniqueness_and_seed():
  examples = listops_generator.generate_examples(60, min_length=20, max_length=120, max_depth=6,
                                                 max_args=5, seed=3)
  sources = [s for s, _ in examples]
  assert len(set(sources)) == len(sources)
  for source, label in examples:
    assert label == _evaluate_source(source)
    assert 20 < len(listops.tokenize(source)) < 120
    # Parentheses balance: one "(" per argument plus one per closer.
    assert source.count("(") == source.count(")")
  again = listops_generator.generate_examples(60, min_length=20, max_length=120, max_depth=6,
                                              max_args=5, seed=3)
  assert again == examples
  assert listops_generator.generate_examples(60, min_length=20, max_length=120, max_depth=6,
                                             max_args=5, seed=4) != examples


def test_median_of_even_count_truncates_the_mean():
  assert listops_generator.evaluate("[MED", [1, 4]) == 2  # mean 2.5 -> 2
  assert listops_generator.evaluate("[SM", [9, 8, 7]) == 4


def test_release_format_parsing(tmp_path):
  path = tmp_path / "basic_train.tsv"
  path.write_text("Source\tTarget\n( ( ( [MAX 2 ) 9 ) ] )\t9\n")
  tokens, labels = listops.read_tsv(path)
  assert labels == [9]
  assert tokens == [[listops.TOKEN_IDS[s] for s in ("[MAX", "2", "9", "]")]]
  assert listops.decode(np.array(tokens[0] + [0, 0])) == "[MAX 2 9 ]"


@pytest.mark.parametrize("row, problem", [
    ("( [MAX 2 ] )", "2 tab-separated fields"),
    ("( [MAX 2 ] )\t12", "Target must be a digit"),
    ("( [FOO 2 ] )\t2", "unknown ListOps symbol"),
])
def test_malformed_row_names_file_and_line(tmp_path, row, problem):
  path = tmp_path / "basic_val.tsv"
  path.write_text(f"Source\tTarget\n( [MIN 1 2 ] )\t1\n{row}\n")
  with pytest.raises(ValueError, match=problem) as error:
    listops.read_tsv(path)
  assert f"{path}:3" in str(error.value)


def test_vocabulary_is_identical_across_processes():
  code = ("from lra.tasks import listops; print(listops.TOKEN_IDS); "
          "print(listops.tokenize('( ( [SM 3 ) ( [MED 1 2 ] ) ] )'))")
  outputs = set()
  for hash_seed in ("0", "1", "12345"):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": hash_seed, "PATH": "/usr/bin:/bin"},
                         cwd=Path(__file__).resolve().parents[1])
    outputs.add(out.stdout)
  assert len(outputs) == 1


def test_prepare_generated_data_and_release_nesting(tmp_path):
  raw = tmp_path / "lra_release" / "lra_release" / "listops-1000"
  listops_generator.write_release(raw, num_train=40, num_val=8, num_test=8, min_length=5,
                                  max_length=40, max_depth=4, max_args=4, seed=0)
  meta = listops.prepare(tmp_path, tmp_path / "cache")  # outer folder of the double nesting
  assert meta["splits"] == {"train": 40, "val": 8, "test": 8}
  assert meta["seq_len"] % 16 == 0 and meta["vocab_size"] == 16
  data = PreparedData(tmp_path / "cache")
  arrays = data.split("val")
  source, label = (raw / "basic_val.tsv").read_text().splitlines()[3].split("\t")
  ids = listops.tokenize(source)
  np.testing.assert_array_equal(arrays["inputs"][2, :len(ids)], ids)
  assert not arrays["inputs"][2, len(ids):].any()
  assert int(arrays["label"][2]) == int(label)
  # Preparing the same source again keeps the cache; a changed source is re-read.
  assert listops.prepare(tmp_path, tmp_path / "cache") == meta
  (raw / "basic_val.tsv").write_text("Source\tTarget\n" + "( [MIN 1 2 ] )\t1\n" * 3)
  assert listops.prepare(tmp_path, tmp_path / "cache")["splits"]["val"] == 3


def test_missing_data_names_the_command(tmp_path):
  with pytest.raises(DataMissingError, match="lra data generate listops"):
    PreparedData(tmp_path / "nothing", hint=listops.TASK.data_hint)
  with pytest.raises(FileNotFoundError, match="lra data generate listops"):
    listops.prepare(tmp_path / "empty", tmp_path / "cache")


def test_many_workers_generate_the_one_core_examples_from_recorded_states(monkeypatch):
  from lra.tasks.generators import listops_states
  params = dict(min_length=20, max_length=120, max_depth=6, max_args=5, seed=3)
  states = listops_states.record({**params, "num_examples": 95}, chunk=20)
  assert len(states["states"]) == 1 + 5  # the seed's, after 20, 40, 60, 80 and 95 examples
  sequential = listops_generator.generate_examples(95, **params)
  # This process has imported JAX and runs its threads (conftest): a child forked from it can
  # inherit a lock another thread held, and hang. No worker may be forked from here (Python
  # 3.12+ also warns "os.fork() is incompatible with multithreaded code"; 3.11 forks in silence).
  forks = []
  real_fork = os.fork
  monkeypatch.setattr(os, "fork", lambda: forks.append(1) or real_fork())
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    assert listops_states.generate(95, workers=2, states=states, **params) == sequential
  monkeypatch.undo()
  assert not forks
  assert not [w for w in caught if "fork" in str(w.message)], [str(w.message) for w in caught]
  # A recorded state that the stream does not reach: the chunks are not trusted (one core then).
  recorded = states["states"]
  broken = dict(states, states=recorded[:3] + recorded[4:5] * 2 + recorded[5:])
  assert listops_states.generate(95, workers=2, states=broken, **params) is None
  # Another recipe than the recorded one: not for these states.
  assert listops_states.generate(95, workers=2, states=states, **{**params, "seed": 4}) is None


@pytest.mark.slow
def test_the_committed_states_are_the_default_recipes_stream():
  # One chunk of the LRA-size recipe (5,000 examples, ~5 s of one core): the first, whose start
  # is the seed's, must end where the committed file says the second begins.
  import random
  from lra.tasks.generators import listops_states
  recorded = json.loads(listops_states.STATES_FILE.read_text())
  assert recorded["recipe"] == listops_states.DEFAULT_RECIPE
  assert len(recorded["states"]) == 1 + 100_000 // recorded["chunk"]
  assert listops_states._decode(recorded["states"][0]) == random.Random(0).getstate()
  params = {k: v for k, v in recorded["recipe"].items() if k not in ("num_examples", "seed")}
  listops_states._chunk(recorded["states"][0], recorded["states"][1], recorded["chunk"], params)
