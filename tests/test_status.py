"""`lra status`: the task x mixer grid per preset, yours beside the committed runs, with the
ledger's accelerator costs on `paper` cells."""
import json

import pytest

from lra import status
from lra.cli import main
from test_results_tables import write_run


def _rows(text, preset):
  """{row label: [cells]} of one preset's block of `lra status`' output."""
  block = text.split(f"preset {preset}\n", 1)[1].split("\n\n", 1)[0].splitlines()
  header = block[0].split()
  rows = {}
  for line in block[1:]:
    cells = [c for c in line.split("  ") if c.strip()]
    rows[cells[0].strip()] = [c.strip() for c in cells[1:]]
  return header, rows


@pytest.fixture
def folders(tmp_path):
  mine, committed = tmp_path / "mine" / "results", tmp_path / "repo" / "results"
  write_run(mine, "listops", "latte", "paper", 0, 0.40)
  write_run(mine, "listops", "latte", "paper", 1, 0.44)
  write_run(mine, "text", "latte", "paper", 0, 0.6, status="interrupted", step=1200,
            num_steps=5000)
  write_run(mine, "listops", "MeanGate@0123abcd", "laptop", 0, 0.3, status="running", step=40,
            num_steps=5000, best_step=-1, test_accuracy=None)
  write_run(mine, "image", "softmax", "paper", 0, 0.5, status="diverged", step=300,
            num_steps=5000)
  write_run(committed, "listops", "latte", "paper", 0, 0.38)  # never averaged with mine
  write_run(committed, "listops", "softmax", "laptop", 0, 0.365)
  write_run(committed, "listops", "softmax", "laptop", 0, 0.99,  # another experiment: own row
            run="laptop+model.num_layers=4_seed0")
  ledger = tmp_path / "ledger.json"
  row = {"why": "", "spec": {}, "eval_rows": 0}
  ledger.write_text(json.dumps({"rows": [
      {**row, "id": "a", "command": "lra run listops latte --preset paper",
       "run": "runs/listops/latte/paper_seed0", "steps": 75000,
       "cost": {"h200": {"steps_per_s": 58.5, "eval_s": 18, "source": "measured here"}}},
      {**row, "id": "b", "command": "lra run text softmax", "run": "runs/text/softmax/paper_seed0",
       "steps": 36000, "cost": {"h200": {"steps_per_s": 2.0, "source": "estimate"}}}]}))
  return mine, committed, ledger


def test_the_grid_says_complete_in_progress_stopped_or_not_run(folders, capsys):
  mine, committed, ledger = folders
  assert status.main(mine, committed, None, ledger) == 0
  out = capsys.readouterr().out
  header, paper = _rows(out, "paper")
  assert header == ["mixer", "ListOps", "Text", "Retrieval", "Image", "Pathfinder", "Path-X"]
  assert paper["latte"][:2] == ["42.00 (n=2) [~22 min on an H200 (measured)]",
                                "in progress 1,200 of 5,000"]
  assert paper["latte (committed)"][0] == "38.00 [~22 min on an H200 (measured)]"
  assert paper["softmax"][:4] == ["not run", "not run [~5.0 h on an H200 (estimate)]", "not run",
                                  "diverged at 300 of 5,000"]
  assert paper["luna"] == ["not run"] * 6  # every registered mixer has a paper row
  header, laptop = _rows(out, "laptop")
  assert header == ["mixer", "ListOps"]
  assert laptop["MeanGate@0123abcd"] == ["in progress 40 of 5,000"]
  assert laptop["softmax (committed)"] == ["36.50"]
  assert laptop["softmax +model.num_layers=4 (committed)"] == ["99.00"]
  assert "[" not in "".join(sum(laptop.values(), []))  # costs are for paper rows only


def test_without_a_ledger_or_committed_runs_the_grid_has_no_costs_and_no_marks(folders, capsys):
  mine, _, _ = folders
  assert status.ledger_costs(None) == {} and status.ledger_costs(mine / "absent.json") == {}
  assert status.main(mine, None, ["paper", "lra"], None) == 0
  out = capsys.readouterr().out
  _, paper = _rows(out, "paper")
  assert paper["latte"][0] == "42.00 (n=2)" and "committed" not in out and "[" not in out
  assert "preset lra: no runs yet" in out and "preset laptop" not in out


def test_the_command_reads_your_folder_and_refuses_an_unknown_preset(folders, tmp_path, capsys,
                                                                     monkeypatch):
  mine, _, ledger = folders
  monkeypatch.chdir(mine.parent)
  (mine.parent / "results").rename(mine.parent / "elsewhere")
  assert main(["status", "--results-dir", "elsewhere", "--mine-only", "--ledger",
               str(ledger)]) == 0
  out = capsys.readouterr().out
  assert out.startswith("lra status: your runs in elsewhere/runs/.")
  assert "42.00 (n=2) [~22 min" in out and "(committed)" not in out
  assert main(["status", "--presets", "papr"]) == 2
  assert "unknown papr; valid presets: paper" in capsys.readouterr().err
