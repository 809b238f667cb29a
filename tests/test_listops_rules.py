"""tools/listops_rules.py: the shallow-rule baselines that explain the ~36% ListOps plateau."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from lra.tasks.generators import listops

TOOL = Path(__file__).resolve().parents[1] / "tools" / "listops_rules.py"
_spec = importlib.util.spec_from_file_location("listops_rules", TOOL)
rules = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rules)


def test_parse_and_shallow_values_of_a_known_tree():
  # SM(2, MIN(3, 1), 9) = 12 mod 10 = 2; without the nested MIN (depth 1): SM(2, 9) = 1.
  source = "( ( ( ( [SM 2 ) ( ( ( [MIN 3 ) 1 ) ] ) ) 9 ) ] )"
  tree = rules.parse(source)
  assert tree == ("[SM", 2, ("[MIN", 3, 1), 9)
  assert rules.shallow_value(tree, None) == 2
  assert rules.shallow_value(tree, 1) == 1
  assert rules.shallow_value(tree, 2) == 2
  with pytest.raises(ValueError, match="well-formed"):
    rules.parse("[MAX 2 9")


@pytest.fixture(scope="module")
def release(tmp_path_factory):
  out = tmp_path_factory.mktemp("listops")
  listops.write_release(out, num_train=600, num_val=10, num_test=300, min_length=20,
                        max_length=120, max_depth=5, max_args=5, seed=3)
  return out


def test_rules_on_generated_data_and_a_model_that_is_the_whole_tree(release, tmp_path):
  """The whole tree is the generator's own label (100%); the majority-class rule scores the test
  share of the most frequent train label; each rule scores at least the majority's accuracy on
  these data. A "model" that predicts the labels agrees with the whole tree everywhere."""
  test_labels = np.array([label for _, label in rules.read_split(release, "test")])
  train_labels = [label for _, label in rules.read_split(release, "train")]
  np.save(tmp_path / "oracle.npy", test_labels)
  np.save(tmp_path / "short.npy", test_labels[:-1])
  result = rules.main(["--data", str(release), "--fit", "600", "--predictions",
                       f"oracle={tmp_path / 'oracle.npy'}", "--json", str(tmp_path / "r.json")])
  assert json.loads((tmp_path / "r.json").read_text()) == json.loads(json.dumps(result))
  scores = result["rules"]
  assert scores["the whole tree"] == 1.0
  majority = np.bincount(train_labels).argmax()
  assert scores["majority class"] == pytest.approx(np.mean(test_labels == majority))
  assert scores["outermost operator"] > scores["majority class"]
  oracle = result["models"]["oracle"]
  assert oracle["accuracy"] == 1.0
  assert oracle["rules"]["the whole tree"]["agreement"] == 1.0
  assert oracle["rules"]["majority class"]["agreement"] == pytest.approx(scores["majority class"])
  by_operator = oracle["by_outermost_operator"]
  assert sum(o["count"] for o in by_operator.values()) == 300
  for o in by_operator.values():
    assert o["accuracy"] == 1.0 and o["predicted"] == o["label"]
  assert np.argmax(by_operator["[MAX"]["label"]) >= 5  # the maximum of 2+ digits runs high
  with pytest.raises(ValueError, match="predictions for 300 test examples"):
    rules.main(["--data", str(release), "--predictions", f"short={tmp_path / 'short.npy'}"])


def test_a_bad_row_names_its_file_and_line(tmp_path):
  (tmp_path / "basic_train.tsv").write_text("Source\tTarget\n[MAX 2 9 ]\t9\n[MAX 2 9\t9\n")
  with pytest.raises(ValueError, match=r"basic_train.tsv:3: not one well-formed"):
    list(rules.read_split(tmp_path, "train"))
  with pytest.raises(FileNotFoundError, match="lra data generate listops"):
    list(rules.read_split(tmp_path, "test"))
