"""tools/pathfinder_study.py lists the Pathfinder study's runs by command: each committed run folder
must hold what its listed command runs, or the study's table would describe other runs."""
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lra.runs.command import run_config
from lra.runs import pack
from lra.runs.run_identity import flatten, read_config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import pathfinder_study as study  # noqa: E402  pylint: disable=wrong-import-position


@pytest.mark.parametrize("run", study.STUDY, ids=lambda run: run.name)
def test_each_listed_command_is_what_its_committed_run_ran(run):
  saved_path = study.OUT / run.name / "config.json"
  assert saved_path.exists(), f"{run.name} is listed but has no committed run folder"
  saved = read_config(saved_path)  # keys added since read as what the run computed
  resolved = run_config(run.command()[1:]).to_dict()
  # The run's own mixer and every shared section; other mixers' defaults may have moved since
  # (no run of this one reads them).
  def read(config: dict) -> dict:
    return flatten({k: v for k, v in config.items() if k != "mixers"}
                   | {"mixers": {run.mixer: config["mixers"][run.mixer]}})
  want, got = read(saved), read(resolved)
  differ = {k: (v, got.get(k, "<absent>")) for k, v in want.items() if k not in got or got[k] != v}
  assert not differ, f"{run.name}: saved vs the listed command's config: {differ}"


def test_the_summary_table_is_what_the_run_folders_say():
  """results/pathfinder_study/README.md's table is generated (`summary`): a run resumed or stopped
  since must be summarised again. Its steps are where final.json says a run stopped (23,876), not
  its curve's last log point (23,850)."""
  committed = [line for line in study.generated_lines((study.OUT / "README.md").read_text())
               if line.startswith("|")]
  assert committed == study.table(), "run `python tools/pathfinder_study.py summary`"


def test_the_reports_study_numbers_are_the_run_folders():
  """The study's report (results/pathfinder_study/README.md, above its generated table) types the
  study's numbers in its own tables: each row's stop step is final.json's and its accuracies and
  losses are the summary's, so they cannot drift from the runs."""
  import re
  # pylint: disable=protected-access
  rows = {row["run"]: row for row in map(study._row, study.STUDY) if row}
  checked = 0
  text = (study.OUT / "README.md").read_text()
  for line in text[:text.index(study.MARKERS[0])].splitlines():
    named = re.match(r"\| `([\w.\-]+)` \|", line)
    if not named or named.group(1) not in rows:
      continue
    name, row = named.group(1), rows[named.group(1)]
    final = json.loads((study.OUT / name / "final.json").read_text())
    for step in re.findall(r"(?:stopped at|by step) ([\d,]+)", line):
      assert int(step.replace(",", "")) == final["step"], (name, step, final["step"])
    cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
    if len(cells) == 8:  # shorter sequences: first val >= 55%, best val, test at best val
      assert cells[4].split(" (")[0].startswith(row["first val >= 55%"]), (name, cells[4])
      assert cells[5].split()[0] == row["best val"] and cells[6] == row["test at best val"], name
    elif len(cells) == 4:  # the fitting screens: last train loss and accuracy
      assert cells[2:] == [row["last train loss"], row["last train accuracy"] + "%"], name
    checked += 1
  assert checked >= 16


def test_a_killed_runs_status_reads_stopped(tmp_path):
  # The lock a killed run leaves: a pid above Linux's maximum (2^22), on this host.
  (tmp_path / "lock").write_text(json.dumps({"pid": 2 ** 22 + 7, "host": platform.node(),
                                             "started": "2026-11-27T00:00:00+00:00"}))
  assert study.status_of({"status": "running"}, tmp_path) == "stopped"
  assert study.status_of({"status": "complete"}, tmp_path) == "complete"


def test_run_pins_a_core_and_passes_stop_after(monkeypatch):
  calls = []
  monkeypatch.setattr(study.subprocess, "call",
                      lambda command, cwd, env: calls.append((command, env)) or 0)
  assert study.main(["run", study.STUDY[0].name, "--core", "1", "--stop-after", "600"]) == 0
  (command, env), = calls
  assert command[:3] == ["taskset", "-c", "1"] and command[3:-2] == study.STUDY[0].command()
  assert command[-2:] == ["--stop-after", "600"]
  # `--stop-after` is a run option, not a config override: `lra run` accepts it.
  assert run_config(command[4:]).train.num_steps == 6000


def test_an_override_of_an_eval_setting_replaces_it_once():
  run = study.StudyRun("x", "s5", "?", ("eval.every_steps=1000", "train.num_steps=30000"),
                       difficulty="easy")
  command = run.command()
  assert command.count("--config.eval.every_steps=1000") == 1
  assert not any(arg.startswith("--config.eval.every_steps=500") for arg in command)
  config = run_config(command[1:])
  assert (config.eval.every_steps, config.eval.max_examples) == (1000, 2000)
  assert config.data.generator.difficulty == "easy"


def test_a_fitting_screen_trains_600_steps_on_600_easy_images():
  screens = [run for run in study.STUDY if run.fit]
  assert screens and all(run.difficulty == "easy" for run in screens)
  config = run_config(screens[0].command()[1:])
  assert (config.data.generator.num_images, config.train.num_steps) == (600, 600)
  assert config.train.warmup_steps == 60 and config.eval.every_steps == 200
  assert not any(run.fit for run in study.STUDY if run.name.startswith(("easy_", "hard_")))


def test_square_token_runs_are_told_apart_from_pixel_runs():
  """`patch` (which sets their tokens column and curves file) is the model.patch they ran with."""
  squares = [run for run in study.STUDY if run.patch > 1]
  assert squares
  for run in (*squares, study.STUDY[0]):
    assert run_config(run.command()[1:]).model.patch == run.patch


def test_run_unpacks_an_archive_split_into_parts(tmp_path, monkeypatch, capsys):
  # A stopped run whose archive grew past one part (run.pack.1, .2, ...: no run.pack), on a
  # machine without its checkpoints: it must resume from them, not restart over its own curve.
  monkeypatch.setattr(study, "ROOT", tmp_path)
  monkeypatch.setattr(study, "OUT", tmp_path / "results" / "pathfinder_study")
  folder = study.OUT / "carried"
  state = folder / "checkpoints" / "7" / "state"
  state.mkdir(parents=True)
  (state / "array").write_bytes(np.random.default_rng(0).bytes(50_000))
  carried = study.StudyRun("carried", "latte", "?")
  (folder / "config.json").write_text(json.dumps(run_config(carried.command()[1:]).to_dict()))
  (folder / "final.json").write_text(json.dumps({"status": "interrupted", "step": 7,
                                                 "num_steps": 20}))
  monkeypatch.setattr(pack, "PART_BYTES", 20_000)
  parts = pack.pack(folder, folder / "run.pack")
  assert len(parts) > 1 and not (folder / "run.pack").exists()
  saved = (state / "array").read_bytes()
  shutil.rmtree(folder / "checkpoints" / "7")
  calls = []
  monkeypatch.setattr(study.subprocess, "call",
                      lambda command, cwd, env: calls.append(command) or 0)
  assert study.run(carried, core=None) == 0 and study.run(carried, core=None) == 0
  assert (state / "array").read_bytes() == saved
  assert capsys.readouterr().out.count("unpacked results/pathfinder_study/carried/run.pack") == 1
  assert calls == [carried.command()] * 2


# The threads of XLA's CPU intra-op pool (tsl's "XLAEigen", named tf_XLAEigen in the pinned
# jaxlib) after a matmul; a changed name reads 0 and fails the test, so a new jaxlib is checked.
POOL = """
import os, jax, jax.numpy as jnp
x = jnp.ones((256, 256)); (x @ x).block_until_ready()
names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
print(names.count("tf_XLAEigen"))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads Linux's /proc")
def test_a_pinned_run_gets_flags_xla_accepts_and_one_intra_op_thread(monkeypatch):
  calls = []
  monkeypatch.setattr(study.subprocess, "call",
                      lambda command, cwd, env: calls.append((command, env)) or 0)
  core = min(os.sched_getaffinity(0))
  assert study.main(["run", study.STUDY[0].name, "--core", str(core)]) == 0
  (command, env), = calls
  # XLA skips a word without `--` in silence (so `intra_op_parallelism_threads=1` did nothing)
  # and aborts on an unknown `--` flag: every word must be a flag, and the child must start.
  assert all(word.startswith("--") for word in env["XLA_FLAGS"].split()), env["XLA_FLAGS"]
  for prefix in (command[:3], []):  # as the run starts, and without taskset: the env alone pins
    child = subprocess.run([*prefix, sys.executable, "-c", POOL],
                           env={**env, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True,
                           timeout=120, check=False)
    assert child.returncode == 0, child.stderr
    # XLA's flag parser reports from parse_flags_from_env (fatal for an unknown flag).
    assert "parse_flags_from_env" not in child.stderr and "Unknown flag" not in child.stderr, (
        child.stderr)
    assert child.stdout.split() == ["1"], (prefix, child.stdout, child.stderr)
