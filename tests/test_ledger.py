"""The committed ledger of paper rows: each row's command is a run the suite resolves, into the
folder the ledger names; the docs table is current; progress reads from run folders."""
import json
import re
from pathlib import Path

import pytest

from lra.runs.command import run_config
from lra.report import ledger, run_summary
from lra.runs.config_loading import default_run_dir

ROOT = Path(__file__).resolve().parents[1]
ROWS = ledger.load(ROOT / "results" / "ledger.json")


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["id"])
def test_each_row_is_the_run_its_command_makes(row):
  config = run_config(ledger.run_args(row))
  # The folder `lra run` picks for this command today is the ledger's: a changed preset default
  # (PAPER_DROPOUT_BITS, say) must come with rows in progress pinning their value.
  assert default_run_dir(config, Path("R")).as_posix() == f"R/{row['run']}"
  assert row["steps"] == config.train.num_steps
  for kind, cost in row["cost"].items():
    assert kind in ledger.KINDS and cost["steps_per_s"] > 0 and cost["source"]


def test_the_first_row_is_latte_listops_paper_and_costs_are_sourced():
  assert ROWS[0]["command"] == "lra run listops latte --preset paper"
  h200 = ROWS[0]["cost"]["h200"]
  assert "measured" in h200["source"] and h200["steps_per_s"] > 0
  # A measured figure names the loan's report, committed beside the others.
  cited = re.findall(r"results/accelerator/[\w.-]+", h200["source"])
  assert cited and all((ROOT / folder).is_dir() for folder in cited), h200["source"]
  assert all(row["cost"].get("h200") and row["cost"].get("h100") for row in ROWS)
  assert len({row["run"] for row in ROWS}) == len(ROWS)


def test_the_docs_table_is_the_ledgers():
  assert ledger.main(["--check", "--results-dir", str(ROOT / "results")]) == 0


def test_progress_and_the_next_row_come_from_run_folders(tmp_path):
  first, second = ROWS[:2]
  assert ledger.first_unfinished(ROWS, tmp_path) == first
  assert ledger.status(first, tmp_path) == "not started"
  folder = tmp_path / first["run"]
  folder.mkdir(parents=True)
  final = {"status": "interrupted", "step": 31250, "num_steps": 75000, "best_step": 30000,
           "test_accuracy": 0.3755}
  (folder / "final.json").write_text(json.dumps(final))
  # Interrupted: sealed and resumable, so stopped (its loan ended), not in progress.
  assert ledger.status(first, tmp_path).startswith(
      "stopped at step 31,250 of 75,000, best so far 37.55% test at the best val step 30,000")
  assert run_summary.state_text({**final, "status": "running", "best_step": -1,
                                 "test_accuracy": None}) == (
      "in progress: step 31,250 of 75,000, no evaluation yet")
  (folder / "final.json").write_text(json.dumps({**final, "status": "complete"}))
  assert ledger.first_unfinished(ROWS, tmp_path) == second


def test_a_row_that_is_not_an_lra_run_is_named(tmp_path):
  path = tmp_path / "ledger.json"
  path.write_text(json.dumps({"rows": [{**ROWS[0], "command": "python train.py"}]}))
  with pytest.raises(ValueError, match="row listops-latte-paper-seed0: its command must be"):
    ledger.load(path)


@pytest.mark.parametrize("status", ["diverged", "failed"])
def test_a_row_that_stopped_is_skipped_and_named_not_retried(tmp_path, status):
  # Rerunning a diverged (or failed) row repeats the same steps from the same state: a loan that
  # picked it again would spend its time on the same stop, every loan after it too.
  first, second = ROWS[:2]
  (tmp_path / first["run"]).mkdir(parents=True)
  (tmp_path / first["run"] / "final.json").write_text(json.dumps(
      {"status": status, "step": 600, "num_steps": 75000, "best_step": -1}))
  assert ledger.first_unfinished(ROWS, tmp_path) == second
  assert ledger.stopped(ROWS, tmp_path) == [first]
  assert ledger.status(first, tmp_path).startswith(
      "diverged (loss not finite) at step 600" if status == "diverged" else "failed at step 600")


def test_the_command_is_read_by_the_clis_own_parser(tmp_path):
  # `--preset=lra` and options before the task are what `lra run` accepts; a hand-made reading
  # of the words put such a row's cost in the paper grid's cell, or refused its run folder.
  row = {**ROWS[0], "id": "listops-latte-lra", "run": "runs/listops/latte/lra_seed0",
         "command": "lra run --preset=lra listops latte"}
  path = tmp_path / "ledger.json"
  path.write_text(json.dumps({"rows": [row]}))
  assert ledger.load(path) == [row]
  parsed = ledger.parsed(row)
  assert (parsed.task, parsed.mixer, parsed.preset) == ("listops", "latte", "lra")
  assert list(ledger.cell_costs([row])) == [("listops", "latte", "lra")]
  assert list(ledger.cell_costs(ROWS[:1])) == [("listops", "latte", "paper")]
  with pytest.raises(ValueError, match="its run folder runs/text/latte/lra_seed0 is not under "
                                       "runs/listops/"):
    path.write_text(json.dumps({"rows": [{**row, "run": "runs/text/latte/lra_seed0"}]}))
    ledger.load(path)
