"""The researcher's loop from the command line: what the bare command accepts, seeds and overrides,
messages that name the right thing, summaries without placeholders, and quiet edges (a closed
pipe, a failed run's folders, missing data, `lra diff`, a stray override)."""
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lra.report import run_summary
from lra.cli import main
from lra.runs.command import split_overrides

ROOT = Path(__file__).resolve().parents[1]
PLACEHOLDERS = re.compile(r"n/a|-1\b|-100\.00%|\b0\.0 steps/s|None")


def _dry_values(out):
  """{key: (value, source)} of a dry run's config lines."""
  values = {}
  for line in out.splitlines():
    if line.startswith("  ") and " = " in line:
      key, rest = line.strip().split(" = ", 1)
      value, source = rest.rsplit("  ", 1)
      values[key] = (value.strip(), source.strip())
  return values


# --- 1. The bare command -------------------------------------------------------------------------

@pytest.mark.parametrize("preset, fix", [
    ("laptop", "`lra run listops latte --preset laptop`"),
    ("paper", "`lra run listops latte --preset paper`"),
    ("published", "`lra run listops s5 --preset published`"),
    ("nope", "`lra list` shows every preset"),
])
def test_bare_lra_refuses_presets_its_help_does_not_name(preset, fix, tmp_path, capsys,
                                                         monkeypatch):
  monkeypatch.chdir(tmp_path)
  for extra in (["--dry-run"], ["--quiet", "--data-dir", str(tmp_path / "data")]):
    assert main(["--preset", preset, *extra]) == 2
    out, err = capsys.readouterr()
    assert not out and len(err.strip().splitlines()) == 1
    assert "takes --preset demo or smoke" in err and fix in err
  assert list(tmp_path.iterdir()) == []  # nothing generated, trained or written


def test_bare_lra_runs_the_demo_or_the_smoke_preset(capsys):
  assert main(["--dry-run"]) == 0
  assert "listops x latte (preset demo)" in capsys.readouterr().out
  for preset in ("demo", "smoke"):
    assert main(["--preset", preset, "--dry-run"]) == 0
    assert f"listops x latte (preset {preset})" in capsys.readouterr().out
  # The top level's --preset is the demo's: before a command it is refused, after it it is the
  # command's.
  assert main(["--preset", "laptop", "run", "listops", "latte", "--dry-run"]) == 2
  assert "--preset before `run`" in capsys.readouterr().err
  assert main(["run", "listops", "latte", "--preset", "laptop", "--dry-run"]) == 0
  assert "(preset laptop)" in capsys.readouterr().out


# --- 7. Seeds and overrides ----------------------------------------------------------------------

def test_seed_sets_train_seed_and_the_folder_name(capsys):
  assert main(["run", "listops", "latte", "--seed", "1", "--dry-run"]) == 0
  out = capsys.readouterr().out
  assert "run folder: results/local/runs/listops/latte/paper_seed1 (new)" in out
  assert _dry_values(out)["train.seed"] == ("1", "command line")
  assert main(["--seed", "2", "--dry-run"]) == 0
  assert "demo_seed2" in capsys.readouterr().out
  assert main(["run", "listops", "latte", "--seed", "1", "--config.train.seed=1",
               "--dry-run"]) == 0
  capsys.readouterr()
  assert main(["run", "listops", "latte", "--seed", "1", "--config.train.seed=2"]) == 2
  err = capsys.readouterr().err
  assert "--seed 1 and --config.train.seed=2 disagree" in err and len(err.splitlines()) == 1


def test_run_help_shows_the_override_syntax(capsys):
  with pytest.raises(SystemExit):
    main(["run", "--help"])
  out = " ".join(capsys.readouterr().out.split())
  assert "--config.KEY=VALUE (or --config.KEY VALUE)" in out
  assert "e.g. --config.train.num_steps=100" in out and "--seed SEED" in out


def test_an_override_with_a_space_works_and_one_without_a_value_names_the_form(capsys):
  assert main(["run", "listops", "latte", "--dry-run", "--config.model.num_layers", "3"]) == 0
  out = capsys.readouterr().out
  assert _dry_values(out)["model.num_layers"] == ("3", "command line")
  assert "latte/paper+model.num_layers=3_seed0" in out
  assert split_overrides(["run", "--config.train.seed", "-1", "--config.a=b", "--dry-run"]) == (
      ["run", "--dry-run"], ["train.seed=-1", "a=b"])
  assert main(["run", "listops", "latte", "--dry-run", "--config.model.num_layers"]) == 2
  err = capsys.readouterr().err
  assert ("--config.model.num_layers=VALUE (or --config.model.num_layers VALUE)" in err
          and len(err.splitlines()) == 1)


# --- 6. Messages that name the right thing -------------------------------------------------------

@pytest.mark.parametrize("preset, alike", [("laptop_published", "--preset laptop"),
                                           ("published", "--preset paper")])
def test_an_own_architecture_preset_names_itself_and_its_like_for_like_preset(preset, alike,
                                                                             capsys):
  assert main(["run", "listops", "latte", "--preset", preset, "--dry-run"]) == 2
  err = capsys.readouterr().err
  assert f"Preset '{preset}' rebuilds the S5 and Mega-Chunk rows" in err and alike in err
  assert len(err.splitlines()) == 1


def test_an_empty_results_folder_names_the_command_that_writes_there(tmp_path, capsys):
  empty = tmp_path / "EMPTY"
  empty.mkdir()
  assert main(["table", "--results-dir", str(empty), "--mine-only"]) == 0
  err = capsys.readouterr().err
  assert f"`lra run TASK MIXER --results-dir {empty}` writes runs there" in err
  header = (empty / "tables" / "lra.md").read_text().split("-->")[0]
  assert f"in {empty.as_posix()}/runs/" in header and "results/runs/" not in header


# --- 4. Summaries say what happened ------------------------------------------------------------

def test_a_run_stopped_before_its_first_evaluation_says_so(data_dir, tmp_path, capsys,
                                                           monkeypatch):
  from lra.runs import checkpoints
  save = checkpoints.Checkpointer.save

  def save_then_stop(self, step, *args, **kwargs):  # a SIGTERM just after step 2's checkpoint
    save(self, step, *args, **kwargs)
    if step == 2 and not kwargs.get("best"):
      os.kill(os.getpid(), signal.SIGTERM)

  monkeypatch.setattr(checkpoints.Checkpointer, "save", save_then_stop)
  assert main(["run", "listops", "softmax", "--preset", "smoke", "--quiet", "--data-dir",
               str(data_dir), "--run-dir", str(tmp_path / "run"), "--config.eval.every_steps=4",
               "--config.checkpoint.every_steps=2", "--config.train.log_every_steps=6"]) == 130
  out = capsys.readouterr().out
  assert "listops x softmax (smoke): interrupted at step 2 of 6" in out
  assert "no evaluation yet" in out
  # The command `lra status` and the tables print too, the folder named as it is from here.
  assert (f"saved: `lra run listops softmax --preset smoke --run-dir {tmp_path / 'run'} " in out
          and "` resumes it from this step" in out), out
  assert not PLACEHOLDERS.search(out), out
  assert "steps/s" not in out  # no log window was timed before the stop


def test_a_diverged_run_says_so_without_placeholders(data_dir, tmp_path, capsys):
  assert main(["run", "listops", "softmax", "--preset", "smoke", "--quiet", "--data-dir",
               str(data_dir), "--run-dir", str(tmp_path / "run"),
               "--config.train.learning_rate=1e30", "--config.train.log_every_steps=1",
               "--config.eval.every_steps=4"]) == 1
  out = capsys.readouterr().out
  assert re.search(r"diverged \(loss not finite\) at step \d of 6", out), out
  # From the initial parameters the forward and backward passes are finite: training blew up.
  assert "why: training: from the initial parameters this batch's loss and gradients are " in out
  assert "no evaluation yet" in out and not PLACEHOLDERS.search(out), out
  final = json.loads((tmp_path / "run" / "final.json").read_text())
  assert final["status"] == "diverged" and final["best_step"] == -1  # the markers stay on file
  assert run_summary.state_text(final).endswith("before its first evaluation")


def test_a_resumed_run_stopped_before_a_log_point_has_no_speed_to_report():
  final = {"status": "interrupted", "task": "listops", "mixer": "latte", "preset": "laptop",
           "step": 506, "num_steps": 5000, "best_step": 500, "val_accuracy": 0.3,
           "test_accuracy": 0.31, "best_test_accuracy": 0.31, "best_test_step": 500,
           "test_accuracy_last": None, "majority_accuracy": 0.16, "chance_accuracy": 0.1,
           "num_params": 1000, "steps_per_s": 0.0, "wall_time_s": 12.0, "device": "cpu:cpu"}
  text = "\n".join(run_summary.result_lines(final))
  assert "31.00% at the best val step 500 (val 30.00%); best test 31.00% (step 500)" in text
  assert "steps/s" not in text and "last step" not in text and not PLACEHOLDERS.search(text)
  assert "1,000 parameters, 12s on cpu:cpu" in text
  assert "2.5 steps/s" in "\n".join(run_summary.result_lines({**final, "steps_per_s": 2.5}))


# --- 12. Quiet edges -----------------------------------------------------------------------------

def test_a_closed_stdout_ends_quietly():
  """`lra run ... --dry-run | head -3`: the reader is gone before the output ends. The read end is
  closed before the command starts, so every write meets it (no race with `head`)."""
  read, write = os.pipe()
  os.close(read)
  try:
    done = subprocess.run([sys.executable, "-m", "lra", "run", "listops", "latte", "--dry-run"],
                          stdout=write, stderr=subprocess.PIPE, text=True, cwd=ROOT)
  finally:
    os.close(write)
  assert done.stderr == "" and done.returncode == 141


@pytest.mark.parametrize("task", ["text", "image", "retrieval", "pathfinder", "pathx", "listops"])
def test_missing_data_gives_the_official_url_and_leaves_no_folders(task, tmp_path, capsys):
  results = tmp_path / "results"
  assert main(["run", task, "latte", "--data-dir", str(tmp_path / "none"), "--results-dir",
               str(results)]) == 2
  err = capsys.readouterr().err
  urls = re.findall(r"https://\S+?\.(?:tar\.gz|gz)", err)
  assert urls and all(url in (ROOT / "docs" / "data.md").read_text() for url in urls)
  assert not results.exists()  # the run made results/runs/TASK/latte/...; all empty, all gone


def test_a_failed_run_keeps_folders_that_hold_something(tmp_path, capsys):
  results = tmp_path / "results"
  (results / "runs" / "text").mkdir(parents=True)
  (results / "runs" / "text" / "notes.txt").write_text("mine")
  assert main(["run", "text", "latte", "--data-dir", str(tmp_path / "none"), "--results-dir",
               str(results)]) == 2
  capsys.readouterr()
  assert sorted(p.name for p in (results / "runs" / "text").iterdir()) == ["notes.txt"]


def test_diff_shows_only_the_mixers_the_runs_use(tmp_path, capsys):
  blocks = {"latte": {"num_latents": 40}, "softmax": {"query_chunk": 0}, "luna": {"packed_len": 1}}
  for name, mixer, latents in (("a", "latte", 40), ("b", "softmax", 8)):
    run = tmp_path / name
    run.mkdir()
    config = {"model": {"mixer": mixer}, "mixers": json.loads(json.dumps(blocks))}
    config["mixers"]["latte"]["num_latents"] = latents
    config["mixers"]["luna"]["packed_len"] = latents  # differs, but neither run uses luna
    (run / "config.json").write_text(json.dumps(config))
  assert main(["diff", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
  out = capsys.readouterr().out
  assert "config model.mixer" in out and "config mixers.latte.num_latents" in out
  assert "mixers.luna" not in out and "(absent)" not in out


def test_an_override_of_another_mixers_setting_is_warned_about(capsys):
  assert main(["run", "listops", "latte", "--dry-run", "--config.mixers.softmax.query_chunk=64",
               "--config.mixers.latte.vapor=true"]) == 0
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "--config.mixers.softmax.query_chunk=64 sets a softmax setting" in err[0]
  assert "this run's mixer is latte: it changes nothing" in err[0]


def test_table_committed_and_check_say_what_they_did(tmp_path, capsys, monkeypatch):
  """In a folder laid out like the repository (results/runs, README.md with the table markers)."""
  run = tmp_path / "results" / "runs" / "listops" / "latte" / "demo_seed0"
  run.mkdir(parents=True)
  for name in ("config.json", "final.json", "metrics.jsonl"):
    source = ROOT / "results" / "runs" / "listops" / "latte" / "demo_seed0" / name
    (run / name).write_text(source.read_text())
  (tmp_path / "README.md").write_text("# x\n\n<!-- lra-table:start -->\n<!-- lra-table:end -->\n")
  monkeypatch.chdir(tmp_path)
  assert main(["table", "--committed"]) == 0
  last = capsys.readouterr().out.strip().splitlines()[-1]
  # 7 tasks' CSV and Markdown, lra.csv and lra.md, the run index (runs.csv) and the README.
  assert last.startswith("lra table --committed: 16 file(s) changed: results/tables/ and "
                         "README.md's block from 1 complete run(s) in results/runs/"), last
  assert "beside" not in last  # the committed tables are the committed runs' alone
  assert main(["table", "--committed"]) == 0
  assert capsys.readouterr().out.strip().startswith("lra table --committed: nothing changed")
  assert main(["table", "--check"]) == 0
  out = capsys.readouterr().out.strip().splitlines()
  assert out == ["lra table --check: up to date: results/tables/ and README.md's block from 1 "
                 "complete run(s) in results/runs/"]


# --- 8. The cluster path -------------------------------------------------------------------------

def test_sweep_help_describes_every_option(capsys):
  import argparse

  from lra.cli.entry import build_parser
  parser = build_parser()
  commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
  options = [a for a in commands.choices["sweep"]._actions if a.option_strings]
  assert {o.option_strings[0] for o in options} >= {"--tasks", "--mixers", "--seeds", "--time",
                                                    "--env-activate", "--data-dir", "--emit"}
  assert all(o.help and len(o.help.split()) >= 3 for o in options), [
      o.option_strings for o in options if not o.help]
  with pytest.raises(SystemExit):
    main(["sweep", "--help"])
  assert "--emit slurm --time 08:00:00" in " ".join(capsys.readouterr().out.split())


def test_slurm_time_limits_read_in_every_form_slurm_takes():
  from lra.cli.slurm import limit_seconds
  assert [limit_seconds(t) for t in ("30", "30:15", "08:00:00", "2-0", "1-02:03", "1-00:00:01")] \
      == [1800, 1815, 28800, 172800, 93780, 86401]
  with pytest.raises(ValueError, match="expected Slurm's"):
    limit_seconds("8h")


def test_the_slurm_script_sources_the_named_environment_or_says_there_is_none(tmp_path, capsys):
  common = ["sweep", "--tasks", "listops", "--mixers", "latte", "--preset", "smoke",
            "--results-dir", str(tmp_path / "r"), "--emit", "slurm", "--out"]
  script = tmp_path / "a.sbatch"
  assert main([*common, str(script), "--env-activate", "/opt/my env/bin/activate",
               "--time", "1-00:00:00"]) == 0
  text = script.read_text()
  assert "\nsource '/opt/my env/bin/activate'\nset -euo pipefail\n" in text
  assert "#SBATCH --time=1-00:00:00\n" in text and "'python -m lra run listops latte" in text
  # The run saves and stops before the limit on its own clock: a day less 300 s.
  assert "--stop-after 86100'" in text
  assert "would stop at once" not in capsys.readouterr().err  # smoke generates its own data
  assert main([*common, str(script), "--env-activate", "none"]) == 0
  text = script.read_text()
  assert "\nsource " not in text and "No environment to activate" in text
  assert f"'{sys.executable} -m lra run" in text  # no environment: this Python, by its path
  assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
