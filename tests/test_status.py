"""`lra status`: the task x mixer grid per preset, yours first, then the committed runs, with the
ledger's accelerator costs on `paper` cells as notes under the grid."""
import json
import os
import platform
import re
from pathlib import Path

import pytest

from lra.report import results, status
from lra.cli import main
from test_results_tables import write_run

YOURS, COMMITTED = "yours:", "committed (the repository's runs):"


def _rows(text, preset, section=None):
  """(header, {row label: [cells]}, notes) of one preset's block of `lra status`' output, the
  rows of one section (YOURS or COMMITTED; None: a block without headings)."""
  block = text.split(f"preset {preset}\n", 1)[1].split("\n\n", 1)[0].splitlines()
  header = block[0].split()
  notes, body = [], []
  for line in block[1:]:
    if line.startswith("["):
      notes.append(line)
    elif line.startswith("    ") and notes:  # a note wrapped to the grid's width
      notes[-1] += " " + line.strip()
    else:
      body.append(line)
  if section is not None:
    start = body.index(section) + 1
    ends = [i for i, line in enumerate(body) if line in (YOURS, COMMITTED) and i >= start]
    body = body[start:ends[0] if ends else None]
  rows = {}
  for line in body:
    cells = [c for c in line.split("  ") if c.strip()]
    rows[cells[0].strip()] = [c.strip() for c in cells[1:]]
  return header, rows, notes


@pytest.fixture
def folders(tmp_path):
  mine, committed = tmp_path / "mine" / "results", tmp_path / "repo" / "results"
  write_run(mine, "listops", "latte", "paper", 0, 0.40)
  write_run(mine, "listops", "latte", "paper", 1, 0.44)
  write_run(mine, "text", "latte", "paper", 0, 0.6, status="interrupted", step=1200,
            num_steps=5000)
  going = write_run(mine, "listops", "MeanGate@0123abcd", "laptop", 0, 0.3, status="running",
                    step=40, num_steps=5000, best_step=-1, test_accuracy=None)
  # A live process holds it (this one): in progress. Without the lock it would be stopped.
  (going / "lock").write_text(json.dumps({"pid": os.getpid(), "host": platform.node(),
                                          "started": "2026-11-28T00:00:00+00:00"}))
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
  header, paper, notes = _rows(out, "paper", YOURS)
  assert header == ["mixer", "ListOps", "Text", "Retrieval", "Image", "Pathfinder", "Path-X"]
  assert paper["softmax"][:4] == ["-", "- [1]", "-", "diverged at 300"]
  # Unfinished: the share of its steps; stopped: a note with its step and what resumes it.
  assert paper["latte"][:2] == ["42.00 (n=2) [2]", "24% [3]"]
  assert paper["luna"] == ["-"] * 6  # every registered mixer has a paper row
  assert notes[:2] == ["[1] Text, softmax: ~5.0 h on an H200 (estimate)",  # numbered as read
                       "[2] ListOps, latte: ~22 min on an H200 (measured)"]
  # Stopped sealed: the note is its step and the command that resumes it.
  assert notes[2].startswith("[3] Text, latte: stopped at step 1,200 of 5,000; `lra run text "
                             "latte --preset paper ")
  assert notes[2].endswith(" resumes it")
  assert list(paper)[:2] == ["softmax", "latte"]  # rows with a run before the placeholders
  _, paper_committed, _ = _rows(out, "paper", COMMITTED)
  assert paper_committed == {"latte": ["38.00 [2]", *["-"] * 5]}  # never averaged with yours
  header, laptop, _ = _rows(out, "laptop", YOURS)
  assert header == ["mixer", "ListOps"]
  assert laptop == {"MeanGate@0123abcd": ["1%"]}  # in progress, step 40 of 5,000
  _, laptop, notes = _rows(out, "laptop", COMMITTED)
  assert laptop == {"softmax": ["36.50"], "softmax +num_layers=4": ["99.00"]}
  assert not notes  # costs are for paper rows only


def test_without_a_ledger_or_committed_runs_the_grid_has_no_costs_and_no_marks(folders, capsys):
  mine, _, _ = folders
  assert status.ledger_costs(None) == {} and status.ledger_costs(mine / "absent.json") == {}
  assert status.main(mine, None, ["paper", "lra"], None) == 0
  out = capsys.readouterr().out
  _, paper, _ = _rows(out, "paper")
  assert paper["latte"][0] == "42.00 (n=2)" and "committed (" not in out
  assert "on an H200" not in out  # no cost marks; the one note is the stopped run's resume
  assert YOURS not in out.splitlines()  # nothing to tell apart: no headings
  assert "preset lra: no runs yet" in out and "preset laptop" not in out


def test_the_command_reads_your_folder_and_refuses_an_unknown_preset(folders, tmp_path, capsys,
                                                                     monkeypatch):
  mine, _, ledger = folders
  monkeypatch.chdir(mine.parent)
  (mine.parent / "results").rename(mine.parent / "elsewhere")
  assert main(["status", "--results-dir", "elsewhere", "--mine-only", "--ledger",
               str(ledger)]) == 0
  out = capsys.readouterr().out
  # The folder whole, wherever `lra` runs from.
  assert " ".join(out.split())[:200].startswith(
      f"lra status: your runs in {(mine.parent / 'elsewhere').resolve()}/runs/.")
  assert "42.00 (n=2) [2]" in out and "[2] ListOps, latte: ~22 min" in out
  assert "committed" not in out
  assert main(["status", "--presets", "papr"]) == 2
  assert "unknown papr; valid presets: paper" in capsys.readouterr().err


def test_your_rows_come_first_and_the_grid_fits_100_columns(tmp_path, capsys):
  """`lra status` in a folder of one's own, beside this repository's committed runs and ledger:
  it was ~150 columns wide with your row at the bottom of the grid, under 17 committed ones."""
  committed = results.committed_results_dir()
  if committed is None:
    pytest.skip("needs this repository's committed runs")
  mine = tmp_path / "results"
  write_run(mine, "synthetic", "MeanGate@0123abcd", "paper", 0, 0.40, chance=1 / 16)
  assert status.main(mine, committed, None, committed / "ledger.json") == 0
  out = capsys.readouterr().out
  lines = out.splitlines()
  assert max(map(len, lines)) <= 100, max(lines, key=len)
  block = out.split("preset paper\n", 1)[1].split("\n\n", 1)[0].splitlines()
  assert block[1:3] == [YOURS, block[2]] and block[2].startswith("MeanGate@0123abcd ")
  # Then the built-in mixers no folder has a paper run of yet (placeholders), then the committed.
  assert block[2].split()[-1] == "40.00" and COMMITTED in block
  placeholders = block[3:block.index(COMMITTED)]
  assert all(set(row.split()[1:]) == {"-"} for row in placeholders), placeholders


def test_one_resume_command_from_tables_status_and_the_stop_message(tmp_path, capsys,
                                                                    monkeypatch):
  """Pasted from any of the three, the command resumes the run from where `lra` runs: the
  tables' note named the folder relative to results/ (`--run-dir local/runs/...`: a new run)."""
  from lra.report import run_summary
  monkeypatch.chdir(tmp_path)
  mine = Path("results") / "local"
  run_dir = write_run(mine, "text", "latte", "paper", 0, 0.6, status="interrupted", step=1200,
                      num_steps=5000)

  def command(text):
    return re.search(r"`(lra run [^`]*)` resumes it", " ".join(text.split())).group(1)

  assert main(["table", "--results-dir", str(mine)]) == 0
  from_table = command((mine / "tables" / "lra.md").read_text())
  capsys.readouterr()
  assert main(["status", "--results-dir", str(mine), "--mine-only", "--presets", "paper"]) == 0
  from_status = command(capsys.readouterr().out)
  final = json.loads((run_dir / "final.json").read_text())
  from_stop = command("\n".join(run_summary.result_lines({**final, "run_dir": str(run_dir)})))
  assert from_table == from_status == from_stop
  assert f"--run-dir {run_dir}" in from_table and (tmp_path / run_dir).is_dir()
  (tmp_path / "elsewhere").mkdir()
  monkeypatch.chdir(tmp_path / "elsewhere")  # not under the working folder: named whole
  whole = tmp_path / run_dir
  assert f"--run-dir {whole.resolve()}" in command(run_summary.state_text(final, whole))
