"""tools/pathfinder_probe.py: the ResNet-18 probe, and its runs stopped by a time budget."""
import importlib.util
import json
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "pathfinder_probe.py"
_spec = importlib.util.spec_from_file_location("pathfinder_probe", TOOL)
probe = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = probe  # Flax's dataclasses look their module up by name
_spec.loader.exec_module(probe)

QUICK = ["--model", "resnet18", "--quick"]
# XLA compiles a ResNet-18's init (62 random draws) and train step in ~25 s of one CPU core, once
# per process: the two tests that train are slow; they share the compile when run together.


def test_resnet18_has_the_parameter_count_of_resnet18():
  # torchvision's CIFAR-style ResNet-18 (3x3 stem, no max-pool) has 11,173,962 parameters for 3
  # input channels and 10 classes; one input channel takes 9 * 2 * 64 = 1,152 from the stem and
  # two classes take 8 * 513 = 4,104 from the head.
  variables = jax.eval_shape(probe.ResNet18().init, jax.random.PRNGKey(0),
                             np.zeros((1, 32, 32, 1), np.float32))
  count = sum(x.size for x in jax.tree.leaves(variables["params"]))
  assert count == 11_173_962 - 1_152 - 4_104


@pytest.mark.slow
def test_run_stopped_by_its_budget_resumes_to_the_uninterrupted_run(tmp_path):
  whole, whole_state = probe.train(probe.parse_args([*QUICK, "--out", str(tmp_path / "whole")]))
  parted = [*QUICK, "--out", str(tmp_path / "parted")]
  # The budget counts from the script's start, long past here: it stops after one step.
  first, _ = probe.train(probe.parse_args([*parted, "--time-budget-s", "0"]))
  assert first["status"] == "stopped" and first["stopped_at"]["step"] == 1
  resumed, resumed_state = probe.train(probe.parse_args(parted))
  assert resumed["status"] == "complete" and resumed["resumed_at"] == [1]

  def without_time(curve):
    return [{k: v for k, v in record.items() if k != "seconds"} for record in curve]

  assert without_time(resumed["curve"]) == without_time(whole["curve"])
  assert "batch_stats" in resumed_state["variables"]
  jax.tree.map(np.testing.assert_array_equal, resumed_state, whole_state)
  on_disk = json.loads((tmp_path / "whole" / "probe.json").read_text())
  assert on_disk["status"] == "complete"
  assert [record["step"] for record in on_disk["curve"]] == [4, 8, 12]
  assert all(0 <= record["test_accuracy"] <= 1 for record in on_disk["curve"])


@pytest.mark.slow
def test_resuming_with_other_settings_names_them(tmp_path):
  out = ["--out", str(tmp_path / "run")]
  probe.train(probe.parse_args([*QUICK, *out, "--time-budget-s", "0"]))
  with pytest.raises(SystemExit, match=r"holds a probe run with other settings \(model: dilated "
                                       r"here, resnet18 there"):
    probe.train(probe.parse_args(["--quick", "--model", "dilated", *out]))
