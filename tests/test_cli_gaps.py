"""Small gaps a new user met (issue 80): a mixer file without its class, a dataset's name for a
task's, another task's preset, `--source` undocumented, a sweep that ended without a summary or
costs, and no way to remove one's failed runs."""
import json
from pathlib import Path

import pytest

from lra.cli import main, sweep
from test_own_mixer import LEAKY, MEAN_GATE
from test_results_tables import write_run


def test_check_of_a_file_without_its_class_lists_its_classes(tmp_path, capsys):
  path = tmp_path / "mean_gate.py"
  path.write_text(MEAN_GATE + LEAKY[LEAKY.index("class Leaky"):] + "\n\nclass Helper:\n  pass\n")
  assert main(["check", str(path)]) == 2
  err = capsys.readouterr().err.strip()
  assert err == (f"lra: error: Mixer '{path}' names a file, not a class in it: pass "
                 f"{path}:ClassName, e.g. {path}:MeanGate (Module classes there: MeanGate, "
                 "Leaky).")


@pytest.mark.parametrize("name, task", [("imdb", "text"), ("cifar10", "image"),
                                        ("listop", "listops"), ("path-x", "pathx")])
def test_a_dataset_name_or_a_slip_says_which_task(name, task, tmp_path, capsys):
  assert main(["data", "prepare", name, "--source", str(tmp_path)]) == 2
  assert f"Unknown task '{name}'. Did you mean {task} (" in capsys.readouterr().err
  assert main(["run", name, "latte", "--dry-run"]) == 2
  assert f"Did you mean {task} (" in capsys.readouterr().err


def test_another_tasks_preset_says_whose_it_is(capsys):
  assert main(["run", "listops", "latte", "--preset", "squares", "--dry-run"]) == 2
  err = capsys.readouterr().err
  assert ("lra: error: squares is a Pathfinder preset, not one for listops: lra run pathfinder "
          "MIXER --preset squares. Valid presets for listops: paper,") in err
  assert main(["run", "text", "latte", "--preset", "laptop", "--dry-run"]) == 2
  assert "laptop is a ListOps and Pathfinder preset, not one for text" in capsys.readouterr().err
  assert main(["run", "text", "latte", "--preset", "nope", "--dry-run"]) == 2
  assert "Unknown preset 'nope'. Valid presets for text: " in capsys.readouterr().err


def test_data_prepare_help_says_what_source_takes(capsys):
  with pytest.raises(SystemExit):
    main(["data", "prepare", "--help"])
  page = " ".join(capsys.readouterr().out.split())
  source = page.split("--source PATH", 2)[2]
  for form in ("lra_release/", "aclImdb_v1.tar.gz", "cifar-10-python.tar.gz", "lra data generate"):
    assert form in source.split("--data-dir")[0], form
  assert "docs/data.md" in page


def _finish(run_dir, status, test=0.5):
  run_dir.mkdir(parents=True, exist_ok=True)
  (run_dir / "final.json").write_text(json.dumps({
      "status": status, "task": "synthetic", "mixer": "latte", "preset": "smoke", "step": 6,
      "num_steps": 6, "best_step": 3 if status == "complete" else -1, "test_accuracy": test,
      "val_accuracy": test, "stop_reason": "training: it blew up" if status != "complete" else
      None}))


def test_a_sweep_ends_with_where_each_run_stands(tmp_path, capsys, monkeypatch):
  results = tmp_path / "results"

  def run_jobs(jobs):  # instead of training: the first ends complete, the second diverges
    for job, status in zip(jobs, ("complete", "diverged")):
      _finish(job.run_dir, status)
    return []

  monkeypatch.setattr(sweep, "run_jobs", run_jobs)
  assert main(["sweep", "--tasks", "synthetic", "--mixers", "latte", "softmax", "--preset",
               "smoke", "--results-dir", str(results), "--run"]) == 0
  out, err = capsys.readouterr()
  lines = out.strip().splitlines()
  assert lines[0] == "lra sweep: 2 runs: 1 complete, 1 diverged"
  assert lines[1].startswith("  complete  synthetic x latte smoke_seed0: test accuracy 50.00% at "
                             "the best val step 3")
  assert lines[2].startswith("  diverged  synthetic x softmax smoke_seed0: diverged (loss not "
                             "finite) at step 6 of 6")
  assert "`lra clean` removes the failed and diverged runs" in err


def test_emit_slurm_shows_each_array_tasks_cost(tmp_path, capsys):
  """The dry run knew the H200 cost of a paper row from the ledger; the array's listing did not."""
  out_file = tmp_path / "sweep.sbatch"
  assert main(["sweep", "--tasks", "listops", "--mixers", "latte", "--preset", "paper",
               "--results-dir", str(tmp_path / "results"), "--emit", "slurm", "--out",
               str(out_file), "--sbatch=--gres=gpu:1"]) == 0
  out = capsys.readouterr().out.splitlines()
  assert out[1] == "cost of each array task, as `lra run ... --dry-run` knows it:"
  assert out[2].startswith("  [0] listops x latte paper_seed0: ") and "NVIDIA H200: ~" in out[2]
  assert main(["sweep", "--tasks", "synthetic", "--mixers", "latte", "--preset", "smoke",
               "--results-dir", str(tmp_path / "results"), "--emit", "slurm", "--out",
               str(out_file)]) == 0
  assert capsys.readouterr().out.splitlines()[2] == (
      "  [0] synthetic x latte smoke_seed0: no measured speed of this config (`lra bench "
      "--epoch` times one)")


def test_clean_removes_ones_failed_and_diverged_runs_only(tmp_path, capsys):
  mine = tmp_path / "results"
  kept = [write_run(mine, "listops", "latte", "paper", 0, 0.4),
          write_run(mine, "listops", "latte", "paper", 1, 0.4, status="interrupted")]
  gone = [write_run(mine, "listops", "softmax", "paper", 0, 0.4, status="failed"),
          write_run(mine, "text", "latte", "paper", 0, 0.4, status="diverged")]
  assert main(["clean", "--results-dir", str(mine), "--dry-run"]) == 0
  out = capsys.readouterr().out
  assert all(f"would remove {d} (" in out for d in gone) and all(d.is_dir() for d in gone)
  assert main(["clean", "--results-dir", str(mine)]) == 0
  assert not any(d.exists() for d in gone) and all(d.is_dir() for d in kept)
  assert not (mine / "runs" / "text").exists()  # emptied folders go too
  capsys.readouterr()
  assert main(["clean", "--results-dir", str(mine)]) == 0
  assert "no diverged or failed runs" in capsys.readouterr().out
  assert main(["clean", "--results-dir", str(Path(__file__).resolve().parents[1] / "results")]
              ) == 2
  assert "lra clean removes only your own" in capsys.readouterr().err
