"""lra.report.results, `lra table` and `lra sweep` on run directories the tests write themselves."""
import csv
import io
import json
import shutil
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from lra.cli import slurm, sweep
from lra.report import results, tables
from lra.cli import main

ROOT = Path(__file__).resolve().parents[1]


def write_run(results_dir, task, mixer, preset, seed, test, *, status="complete", val=None,
              best=None, last=None, run=None, config=None, chance=0.1, majority=0.2,
              curve=((10, 0.5), (20, 0.6)), **final_extra):
  """A run directory as lra.training.train writes it (accuracies as fractions; `test` at the best
  val step, `best` the best test, `last` the last step's test, both defaulting to `test`)."""
  run_dir = results_dir / "runs" / task / mixer / (run or f"{preset}_seed{seed}")
  run_dir.mkdir(parents=True)
  cfg = config or {"task": task, "preset": preset, "model": {"mixer": mixer, "dim": 8},
                   "mixers": {mixer: {"num_latents": 40}}, "train": {"seed": seed,
                                                                    "num_steps": 20}}
  cfg = json.loads(json.dumps(cfg))
  cfg["train"]["seed"] = seed
  (run_dir / "config.json").write_text(json.dumps(cfg))
  lines = []
  for step, loss in curve:
    lines.append(json.dumps({"step": step, "train/loss": loss, "train/accuracy": 1 - loss}))
    lines.append(json.dumps({"step": step, "val/accuracy": 1 - loss / 2}))
  (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
  final = {"status": status, "task": task, "mixer": mixer, "preset": preset, "seed": seed,
           "step": 20, "num_steps": 20, "best_step": 20, "val_accuracy": val or test,
           "test_accuracy": test, "best_test_accuracy": test if best is None else best,
           "test_accuracy_last": test if last is None else last, "chance_accuracy": chance,
           "majority_accuracy": majority, "majority_class": 0, "num_params": 123,
           "steps_per_s": 10.0 + seed, "wall_time_s": 2.0, "seq_len": 64, "device": "cpu:cpu",
           "num_devices": 1, "git_sha": "abc", **final_extra}
  (run_dir / "final.json").write_text(json.dumps(final))
  return run_dir


def read_csv(path):
  lines = Path(path).read_text().splitlines(True)
  text = "".join(line for line in lines if not line.startswith("#"))
  return list(csv.DictReader(io.StringIO(text)))


@pytest.fixture
def grid(tmp_path):
  res = tmp_path / "results"
  accs = {"listops": [0.40, 0.44, 0.43], "text": [0.60, 0.62, 0.64], "retrieval": [0.70] * 3,
          "image": [0.45, 0.46, 0.47], "pathfinder": [0.71, 0.70, 0.72]}
  for task, values in accs.items():
    chance = 0.1 if task in ("listops", "image") else 0.5
    for seed, acc in enumerate(values):
      write_run(res, task, "latte", "paper", seed, acc, best=acc + 0.02, last=acc - 0.01,
                chance=chance, majority=chance)
  write_run(res, "listops", "softmax", "demo", 0, 0.55)
  write_run(res, "listops", "softmax", "demo", 1, 0.205)  # at majority + 0.5 point
  write_run(res, "listops", "softmax", "paper", 0, 0.9, status="diverged")
  write_run(res, "listops", "softmax", "paper", 1, 0.9, status="running")
  write_run(res, "synthetic", "softmax", "smoke", 0, 0.33, chance=0.5)
  # A Latte run with L = D is compared with the paper's L=D row; softmax with the LRA code's.
  write_run(res, "listops", "latte", "paper", 0, 0.41, best=0.43,
            run="paper+mixers.latte.num_latents=8_seed0",
            config={"task": "listops", "preset": "paper", "model": {"mixer": "latte", "dim": 8},
                    "mixers": {"latte": {"num_latents": 8}}, "train": {"num_steps": 20}})
  write_run(res, "listops", "softmax", "lra", 0, 0.33, best=0.36, last=0.35)
  return res, accs


def test_load_runs_and_curves(grid):
  res, _ = grid
  runs = results.load_runs(res)
  assert len(runs) == 22
  assert set(results.load_runs(res, status="complete")["run"]) >= {"paper_seed0", "demo_seed1"}
  assert len(results.load_runs(res, status="complete")) == 20
  run = runs[(runs.task == "text") & (runs.seed == 2)].iloc[0]
  assert run.run_dir == "results/runs/text/latte/paper_seed2" and run.variant == "paper"
  with open(res.parent / run.run_dir / "metrics.jsonl", "a") as f:
    f.write('{"step": 3')  # a last line cut short by a kill
  with pytest.warns(results.RunFileWarning, match="text/latte/paper_seed2/metrics.jsonl: line 5"):
    curves = results.load_curves(res.parent / run.run_dir)
  assert list(curves["step"]) == [10, 20]  # train and val lines of a step merged, torn line gone
  assert curves.loc[1, "train/loss"] == 0.6 and curves.loc[1, "val/accuracy"] == 0.7
  with pytest.warns(results.RunFileWarning):  # the same cut-short line, once per reader
    every = results.load_all_curves(runs, res)
  assert len(every) == 44 and set(every["mixer"]) == {"latte", "softmax"}


def test_find_results_dir(grid, tmp_path):
  res, _ = grid
  (tmp_path / "notebooks").mkdir()
  assert results.find_results_dir(tmp_path / "notebooks") == res.resolve()
  with pytest.raises(FileNotFoundError, match="lra run"):
    results.find_results_dir(Path("/"))


def test_summary_means_and_config_split(tmp_path):
  res = tmp_path / "results"
  base = {"task": "listops", "preset": "paper", "model": {"dim": 8}, "train": {"num_steps": 5}}
  write_run(res, "listops", "latte", "paper", 0, 0.30, config=base)
  write_run(res, "listops", "latte", "paper", 1, 0.50, config=base)
  other = {**base, "model": {"dim": 16}}
  write_run(res, "listops", "latte", "paper", 2, 0.90, config=other)
  write_run(res, "listops", "latte", "paper", 0, 0.60, run="paper_L64_seed0", config=base)
  summary = results.summarize(results.load_runs(res))
  assert len(summary) == 3  # the dim=16 seed never blends into the dim=8 ones
  same = summary[summary["num_runs"] == 2].iloc[0]
  assert same["test_accuracy"] == pytest.approx(0.40)
  assert same["test_accuracy_std"] == pytest.approx(statistics.stdev([0.3, 0.5]))
  assert same["label"].startswith("paper [config ")
  assert "paper (paper_L64)" in set(summary["label"])


def test_table_rows_against_hand_computation(grid):
  res, accs = grid
  assert main(["table", "--results-dir", str(res), "--mine-only"]) == 0  # the grid's rows alone
  published = {r["model"]: r for r in tables.load_published()}
  latte_ref = published["Latte Bid. L=40"]
  rows = read_csv(res / "tables" / "lra.csv")
  ours = [r for r in rows if r["source"] == "yours"]
  assert [(r["mixer"], r["preset"]) for r in ours] == [
      ("softmax", "lra"), ("latte", "paper"),
      ("latte", "paper (paper+mixers.latte.num_latents=8)"), ("softmax", "demo")]
  softmax, latte, latte_d, demo = ours
  means = {t: 100 * statistics.fmean(v) for t, v in accs.items()}
  for task, mean in means.items():
    # Three statistics side by side; the Δ is on the one the Latte paper reports (best test).
    assert float(latte[task]) == pytest.approx(mean, abs=1e-4)
    assert float(latte[f"{task}_best"]) == pytest.approx(mean + 2, abs=1e-4)
    assert float(latte[f"{task}_last"]) == pytest.approx(mean - 1, abs=1e-4)
    assert float(latte[f"{task}_std"]) == pytest.approx(
        100 * statistics.stdev(accs[task]), abs=1e-4)
    assert latte[f"{task}_published_statistic"] == "best_test"
    assert float(latte[f"{task}_delta"]) == pytest.approx(mean + 2 - float(latte_ref[task]),
                                                          abs=1e-4)
    assert latte[f"{task}_n"] == "3"
  assert float(latte["avg_best"]) == pytest.approx(statistics.fmean(means.values()) + 2, abs=1e-4)
  assert latte["pathx"] == "" and latte["published_model"] == "Latte Bid. L=40"
  # L = D is matched with the paper's L=D row, on the same statistic.
  assert latte_d["published_model"] == "Latte Bid. L=D"
  assert float(latte_d["listops_delta"]) == pytest.approx(
      43 - float(published["Latte Bid. L=D"]["listops"]), abs=1e-4)
  # Softmax is compared on the LRA code's statistic, the last step's test accuracy.
  assert softmax["listops_published_statistic"] == "last"
  assert float(softmax["listops_delta"]) == pytest.approx(
      35 - float(published["Bid. Attention (Transformer)"]["listops"]), abs=1e-4)
  assert float(demo["listops"]) == pytest.approx(100 * (0.55 + 0.205) / 2, abs=1e-4)
  assert demo["listops_delta"] == "" and demo["avg"] == ""  # no paper comparison for demo
  assert len([r for r in rows if r["source"] == "published"]) == len(published)
  assert float(next(r for r in rows if r["model"] == "Mega")["avg"]) == pytest.approx(
      statistics.fmean(float(published["Mega"][t]) for t in tables.AVG_TASKS), abs=1e-4)

  listops = read_csv(res / "tables" / "listops.csv")
  demo_row = next(r for r in listops if r["source"] == "yours" and r["preset"] == "demo")
  assert demo_row["runs"] == "demo_seed0;demo_seed1" and demo_row["at_chance"] == "false"
  assert {r["runs"] for r in listops if r["source"] == "yours"} == {
      "paper_seed0;paper_seed1;paper_seed2", "demo_seed0;demo_seed1", "lra_seed0",
      "paper+mixers.latte.num_latents=8_seed0"}  # diverged/running left out
  lra_md = (res / "tables" / "lra.md").read_text()
  assert "Generated by `lra table`" in lra_md
  # An unfinished run says where it stands (and is in no average): no process runs it, so it is
  # stopped, and the command that resumes it follows; a diverged one says so.
  assert ("runs/listops/softmax/paper_seed1 (stopped at step 20 of 20, best so far 90.00% test "
          "at the best val step 20; `lra run listops softmax --preset paper --seed 1 --run-dir "
          ) in lra_md
  assert "runs/listops/softmax/paper_seed0 (diverged (loss not finite) at step" in lra_md
  protocol, small = lra_md.split("## Ours: small presets")
  best_table, rest = protocol.split("### Test accuracy after the last step")
  last_table, val_table = rest.split("### Test accuracy at the best validation step")
  val_table = val_table.split("## Ours: the LRA tasks on a CPU")[0]
  # Each Δ sits in the table of its statistic only.
  assert f"Δ{means['text'] + 2 - float(latte_ref['text']):+.2f}" in best_table
  assert "Δ" not in val_table
  assert "| softmax | lra |" in last_table and "Δ-1.37" in last_table
  assert "| softmax | demo |" in small.split("## Published")[0]
  assert (res / "tables" / "synthetic.csv").exists()
  synthetic = read_csv(res / "tables" / "synthetic.csv")
  assert [r["at_chance"] for r in synthetic] == ["true"]  # 33% on a 2-class task


def test_runs_from_before_a_new_final_key_still_tabulate(tmp_path):
  """Runs written before final.json had `examples_seen` sit beside runs that have it: the column
  is NaN for them (pandas), and the table shows an empty cell instead of failing."""
  res = tmp_path / "results"
  write_run(res, "listops", "latte", "demo", 0, 0.5, examples_seen=640)
  write_run(res, "listops", "softmax", "demo", 0, 0.4)
  files = tables.build(res)
  rows = {line.split("|")[2].strip(): line for line in files["tables/listops.md"].splitlines()
          if line.startswith("| yours")}
  assert "| 640 |" in rows["latte"]
  assert "| 640 |" not in rows["softmax"] and "nan" not in rows["softmax"].lower()


def test_check_detects_stale_tables_and_readme(grid, tmp_path, capsys):
  res, _ = grid
  readme = tmp_path / "README.md"
  original = f"# x\n\n## Results\n{tables.README_START}\nold\n{tables.README_END}\n\n## y\n"
  readme.write_text(original)
  assert main(["table", "--results-dir", str(res)]) == 0
  assert readme.read_text() == original  # the README only changes when asked
  assert main(["table", "--results-dir", str(res), "--readme", str(readme)]) == 0
  text = readme.read_text()
  # Your rows, beside the repository's committed ones: marked as yours.
  assert "| latte (yours) | paper |" in text and text.endswith("## y\n")
  assert tables.MADE_AT.search(text)  # says the commit it was made at
  assert "| softmax | demo |" not in text  # small presets stay in results/tables/lra.md
  check = ["table", "--results-dir", str(res), "--readme", str(readme), "--check"]
  assert main(check) == 0
  # Another commit hash alone is not stale: regenerating could never reproduce it.
  readme.write_text(tables.MADE_AT.sub("at commit 0123abc", text))
  assert main(check) == 0
  write_run(res, "image", "softmax", "paper", 0, 0.3)
  assert main(check) == 1
  assert "image.csv differs" in capsys.readouterr().err
  assert main(["table", "--results-dir", str(res), "--readme", str(readme)]) == 0
  (res / "tables" / "notes.md").write_text("hand-written")
  assert main(check) == 1
  (res / "tables" / "notes.md").unlink()
  readme.write_text(readme.read_text().replace("| latte (yours) | paper |",
                                                "| latte (yours) | edited |"))
  assert main(check) == 1
  assert "lra table --results-dir" in capsys.readouterr().err  # the command that fixes it


def test_table_reads_your_runs_by_default_and_the_committed_ones_when_asked(grid, tmp_path,
                                                                             monkeypatch, capsys):
  """`lra table` in a clone: the user's runs (results/local) make their own tables; the committed
  tables and the README change only with --committed, which is also what --check checks."""
  res, _ = grid
  monkeypatch.chdir(tmp_path)
  readme = tmp_path / "README.md"
  readme.write_text(f"{tables.README_START}\nold\n{tables.README_END}\n")
  local = tmp_path / "results" / "local"
  assert main(["table"]) == 0  # before any run of yours: the published rows, and a hint
  assert "no runs in results/local/runs yet" in capsys.readouterr().err
  write_run(local, "listops", "linear", "laptop", 0, 0.36)
  assert main(["table"]) == 0
  assert "no runs in" not in capsys.readouterr().err
  assert "| linear (yours) | ListOps | laptop |" in (local / "tables" / "lra.md").read_text()
  assert readme.read_text().count("old") == 1 and not (res / "tables").exists()
  assert main(["table", "--check"]) == 1  # the committed tables were never written
  assert main(["table", "--committed"]) == 0
  assert (res / "tables" / "lra.md").exists() and "old" not in readme.read_text()
  assert "| linear |" not in readme.read_text()  # your runs stay out of the committed block
  assert main(["table", "--check"]) == 0


def test_malformed_inputs_name_the_file(tmp_path):
  bad = tmp_path / "published.csv"
  bad.write_text("model,mixer,settings,statistic,listops,text,retrieval,image,pathfinder,pathx,"
                 "source\nX,x,,last,12,abc,1,1,1,,paper\n")
  with pytest.raises(ValueError, match=r"published.csv:2: text is 'abc'"):
    tables.load_published(bad)


def test_damaged_run_files_are_named_skipped_and_fail_the_check(grid, tmp_path, capsys):
  """A truncated final.json, a corrupted metrics.jsonl and a config.json that is not an object:
  readers name each file and skip it; `lra table` warns and goes on; `--check` fails."""
  res, _ = grid
  assert main(["table", "--results-dir", str(res)]) == 0
  runs = res / "runs"
  final = runs / "listops/latte/paper_seed0/final.json"
  final.write_text(final.read_text()[:40])  # truncated
  metrics = runs / "text/latte/paper_seed1/metrics.jsonl"
  lines = metrics.read_text().splitlines()
  metrics.write_text("\n".join([lines[0], "\x00\x00garbage", *lines[1:]]) + "\n")  # corrupted
  config = runs / "image/latte/paper_seed2/config.json"
  config.write_text("[1, 2]")

  with pytest.warns(results.RunFileWarning) as caught:
    runs_frame = results.load_runs(res)
  messages = [str(w.message) for w in caught]
  assert any(str(final) in m and "not valid JSON" in m for m in messages)
  assert any(str(config) in m and "JSON object" in m for m in messages)
  assert len(runs_frame) == 20  # the two runs above are skipped, the others read
  with pytest.warns(results.RunFileWarning, match=r"paper_seed1/metrics.jsonl: line 2"):
    assert results.load_curves(metrics.parent).empty

  capsys.readouterr()
  assert main(["table", "--results-dir", str(res)]) == 0
  err = capsys.readouterr().err
  assert err.count("lra table: warning:") == 2 and str(final) in err and "Traceback" not in err
  assert main(["table", "--results-dir", str(res), "--check"]) == 1
  err = capsys.readouterr().err
  for path in (final, metrics, config):
    assert f"lra table --check: {path}" in err


def test_committed_tables_are_current():
  """What CI checks: results/tables/*, the README's blocks (the table, the short status) and
  docs/status.md's block match the committed runs."""
  assert tables.check(ROOT / "results", ROOT / "README.md") == []


def test_committed_runs_match_todays_configs():
  """Each committed run is what its folder's command resolves to today, so rerunning that
  command in a fresh clone skips or resumes it instead of failing on a stale config."""
  import ml_collections

  from lra.runs import start
  from lra.runs.config_loading import default_run_dir, preset_reference
  stale = []
  for config_path in sorted((ROOT / "results" / "runs").glob("*/*/*/config.json")):
    # A fine-tune committed before the start record reads as the code read it then: named also
    # for how its pretraining (a committed folder too) departs.
    config, _ = start.read_run(config_path.parent, base=ROOT)
    name = default_run_dir(ml_collections.ConfigDict(config), ROOT,
                           preset_reference(config)).name
    if name != config_path.parent.name:
      stale.append(f"{config_path.parent.relative_to(ROOT)}: today it is {name}")
  assert not stale, "rerun these runs with today's code:\n" + "\n".join(stale)


def test_run_names_say_what_differs_from_the_preset():
  from lra.runs import run_identity
  from lra.runs.config_loading import default_run_dir, resolve_config
  plain = resolve_config("listops", "latte", "demo")
  assert default_run_dir(plain, Path("r")) == Path("r/runs/listops/latte/demo_seed0")
  vapor = resolve_config("listops", "latte", "demo", ["mixers.latte.vapor=true", "train.seed=2",
                                                      "train.num_steps=4e3"])
  # num_steps=4e3 is the preset's own value: only the real change names the folder.
  assert default_run_dir(vapor, Path("r")).name == "demo+mixers.latte.vapor=True_seed2"
  # Another mixer's settings are not part of a latte run's identity.
  other = resolve_config("listops", "latte", "demo", ["mixers.luna.packed_len=3"])
  assert default_run_dir(other, Path("r")).name == "demo_seed0"
  assert (run_identity.config_fingerprint(other.to_dict(), plain.to_dict()) ==
          run_identity.config_fingerprint(plain.to_dict(), plain.to_dict()))
  many = resolve_config("listops", "latte", "demo", [f"model.{k}=3" for k in (
      "num_layers", "dim", "num_heads", "mlp_dim")] + ["train.learning_rate=0.5"])
  name = default_run_dir(many, Path("r")).name
  assert name.startswith("demo+cfg-") and name.endswith("_seed0") and len(name) < 30


@pytest.mark.parametrize("preset, departs", [("paper", True), ("lra", False)])
def test_a_key_added_with_a_new_behaviour_reads_old_configs_as_they_ran(preset, departs):
  """Reformer configs written before `attend_across_buckets` attended across buckets: that is a
  departure from today's paper preset (the same-bucket rule), not from the LRA code's preset."""
  from lra.runs import run_identity
  from lra.runs.config_loading import resolve_config
  today = resolve_config("synthetic", "reformer", preset).to_dict()
  old = json.loads(json.dumps(today))
  del old["mixers"]["reformer"]["attend_across_buckets"]
  expected = ["mixers.reformer.attend_across_buckets=True"] if departs else []
  assert run_identity.departures(old, today) == expected
  assert bool(run_identity.same_run(old, today, today)) == departs


def test_sweep_plans_skips_and_emits_slurm(grid, tmp_path, capsys):
  res, _ = grid
  (res / "runs" / "listops" / "latte" / "paper_seed3" / "checkpoints").mkdir(parents=True)
  jobs = sweep.plan(["listops"], ["latte", "softmax"], [0, 1, 3], preset="paper",
                    results_dir=res)
  states = {(j.mixer, j.seed): j.state for j in jobs}
  assert states == {("latte", 0): "complete", ("latte", 1): "complete", ("latte", 3): "partial",
                    ("softmax", 0): "diverged", ("softmax", 1): "partial",
                    ("softmax", 3): "new"}
  # Overrides make another experiment: its own folders, so nothing of the above is skipped.
  changed = sweep.plan(["listops"], ["latte"], [0, 3], preset="paper", results_dir=res,
                       overrides=["train.num_steps=7"])
  assert [(j.run_dir.name, j.state) for j in changed] == [
      ("paper+train.num_steps=7_seed0", "new"), ("paper+train.num_steps=7_seed3", "new")]
  assert changed[1].argv[-2:] == ("--config.train.seed=3", "--config.train.num_steps=7")
  assert main(["sweep", "--tasks", "listops", "--mixers", "latte", "softmax", "--seeds", "0",
               "1", "3", "--results-dir", str(res)]) == 0
  printed = capsys.readouterr().out.splitlines()
  assert len(printed) == 3 and printed[0].endswith("--config.train.seed=3  # resumes")
  script = tmp_path / "grid.sbatch"
  assert main(["sweep", "--tasks", "listops", "--mixers", "latte", "softmax", "--seeds", "0",
               "1", "3", "--results-dir", str(res), "--emit", "slurm", "--out", str(script),
               "--sbatch=--gres=gpu:1"]) == 0
  text = script.read_text()
  assert "#SBATCH --array=0-2" in text and "#SBATCH --gres=gpu:1" in text
  assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
  # The array runs exactly the pending commands, in order: evaluate the bash array itself.
  listing = text.split("set -euo pipefail")[1].split('echo "')[0]
  got = subprocess.run(["bash", "-c", listing.replace('cd "${SLURM_SUBMIT_DIR:-.}"', "")
                        + 'printf "%s\\n" "${COMMANDS[@]}"'], capture_output=True, text=True)
  # Each stops on its own clock: sweep's default --time (24 h) less the 300 s it keeps for saving.
  stop = f" --stop-after {slurm.limit_seconds(slurm.DEFAULT_TIME) - slurm.STOP_BEFORE_LIMIT_S}"
  assert [line.split("-m lra ", 1)[1] for line in got.stdout.splitlines()] == [
      j.command()[len("lra "):] + stop for j in sweep.plan(
          ["listops"], ["latte", "softmax"], [0, 1, 3], preset="paper", results_dir=res)
      if j.pending]
  assert main(["sweep", "--tasks", "listops", "--mixers", "latte", "--seeds", "0",
               "--config.train.seed=1"]) == 2


def test_sweep_names_every_mixer_with_one_word(tmp_path, monkeypatch, capsys):
  """`--mixers builtin`: every mixer of the suite; `all`: those and the installed packages'
  (an entry point, as `pip install` leaves one); with others, each mixer once, in order."""
  from lra.models.mixers import MIXERS
  dist = tmp_path / "tiny_mixers-0.1.dist-info"
  dist.mkdir()
  (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-mixers\nVersion: 0.1\n")
  (dist / "entry_points.txt").write_text("[lra.mixers]\ntiny = tiny_mixers:Tiny\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  assert sweep.expand_mixers(["builtin"]) == list(MIXERS)
  assert sweep.expand_mixers(["all"]) == [*MIXERS, "tiny"]
  assert sweep.expand_mixers(["latte", "builtin", "softmax"]) == [
      "latte", *(m for m in MIXERS if m != "latte")]
  assert sweep.expand_mixers(["my_layers/x.py:X", "latte"]) == ["my_layers/x.py:X", "latte"]
  jobs = sweep.plan(["synthetic"], ["builtin"], [0, 1], preset="paper", results_dir=tmp_path)
  assert [(j.mixer, j.seed) for j in jobs] == [(m, s) for m in MIXERS for s in (0, 1)]
  monkeypatch.chdir(tmp_path)
  assert main(["sweep", "--tasks", "synthetic", "--mixers", "builtin"]) == 0
  printed = capsys.readouterr().out.splitlines()
  assert [line.split()[3] for line in printed] == list(MIXERS)
  with pytest.raises(SystemExit):
    main(["sweep", "--help"])
  said = " ".join(capsys.readouterr().out.split())
  assert "builtin (every mixer of the suite" in said and "all (those and every mixer" in said


@pytest.mark.slow
def test_sweep_runs_then_skips(tmp_path):
  """Two real smoke runs through `lra sweep --run`; the second sweep finds them complete."""
  res, data = tmp_path / "results", tmp_path / "data"
  argv = [sys.executable, "-m", "lra", "sweep", "--tasks", "listops", "--mixers", "softmax",
          "--seeds", "0", "1", "--preset", "smoke", "--results-dir", str(res), "--data-dir",
          str(data)]
  assert subprocess.run([*argv, "--run"], cwd=ROOT).returncode == 0
  runs = results.load_runs(res, status="complete")
  assert sorted(runs["seed"]) == [0, 1]
  again = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
  assert again.stdout == "" and "2 complete" in again.stderr


def test_your_tables_show_the_committed_rows_beside_yours_never_averaged(tmp_path, capsys):
  mine, repo = tmp_path / "mine", tmp_path / "repo" / "results"
  write_run(mine, "listops", "latte", "laptop", 0, 0.50)
  write_run(repo, "listops", "latte", "laptop", 0, 0.30)
  write_run(repo, "listops", "latte", "laptop", 1, 0.34)
  write_run(repo, "listops", "softmax", "laptop", 0, 0.36)
  files = tables.build(mine, committed=repo)
  (tmp_path / "lra.csv").write_text(files["tables/lra.csv"])
  rows = read_csv(tmp_path / "lra.csv")
  latte = {r["source"]: r for r in rows if r["mixer"] == "latte" and r["source"] != "published"}
  assert (float(latte["yours"]["listops"]), latte["yours"]["listops_n"]) == (50.0, "1")
  assert (float(latte["committed"]["listops"]), latte["committed"]["listops_n"]) == (32.0, "2")
  md = files["tables/lra.md"]
  assert "beside 3 of the repository's committed run(s)" in md.split("-->")[0]
  cpu = md.split("## Ours: the LRA tasks on a CPU")[1].split("##")[0]
  # Yours are marked beside the committed ones, as listops.md's source column marks them.
  assert "| latte (yours) | ListOps | laptop | 50.00 |" in cpu
  assert "| latte (committed) | ListOps | laptop | 32.00 ± 2.83 (n=2) |" in cpu
  assert "| softmax (committed) | ListOps | laptop | 36.00 |" in cpu
  assert cpu.index("| latte (yours) |") < cpu.index("| latte (committed) |")  # yours first
  assert "never with yours" in md
  task = files["tables/listops.md"]
  assert "| yours | latte | laptop |" in task and "| committed | latte | laptop |" in task
  alone = tables.build(mine)["tables/lra.md"]
  assert "(committed)" not in alone and "(yours)" not in alone  # nothing to tell apart
  # The command: the repository's own committed runs beside yours, by default.
  assert main(["table", "--results-dir", str(mine)]) == 0
  assert "beside" in capsys.readouterr().out.strip().splitlines()[-1]
  lra_md = (mine / "tables" / "lra.md").read_text()
  assert "| latte (yours) | ListOps | laptop | 50.00 |" in lra_md
  assert "| softmax (committed) | ListOps | laptop |" in lra_md
  assert main(["table", "--results-dir", str(mine), "--mine-only"]) == 0
  assert "(committed)" not in (mine / "tables" / "lra.md").read_text()


def test_the_cpu_table_has_a_column_per_task_with_the_published_number_and_the_cnn_reference(
    tmp_path):
  """The laptop runs of two tasks: one line per mixer, a column per task (ours at the best val
  step, the same mixer's published number beside); Pathfinder's column comes with the line
  naming what the CNN probe reached on a CPU, read from its run."""
  from lra.report import tables
  res = tmp_path / "results"
  write_run(res, "listops", "softmax", "laptop", 0, 0.365)
  write_run(res, "pathfinder", "softmax", "laptop", 0, 0.5005, chance=0.5, majority=0.5)
  write_run(res, "pathfinder", "latte", "laptop", 0, 0.62, chance=0.5, majority=0.5)
  body = tables.build(res)["tables/lra.md"].split("## Ours: the LRA tasks on a CPU")[1]
  assert "| mixer | block | ListOps | published | Pathfinder | published |" in body
  assert ("| softmax | common block | 36.50 | 36.37 (last step) | 50.05 ‡ | 71.40 (last step) |"
          in body)
  assert "| latte | common block |  |  | 62.00 | 75.61 (best test) |" in body
  assert "dilated CNN" not in body  # no probe run in this folder
  probe = res / tables.PROBE_RUN
  probe.parent.mkdir(parents=True)
  curve = [{"step": s, "images_seen": 64 * s, "epochs": 64 * s / 160000, "train_loss": 0.69,
            "test_accuracy": acc, "seconds": 0.2 * s} for s, acc in
           ((1000, 0.5), (2000, 0.501), (7000, 0.58), (50000, 0.781))]
  probe.write_text(json.dumps({"batch_size": 64, "num_train": 160000, "curve": curve}))
  body = tables.build(res)["tables/lra.md"].split("## Ours: the LRA tasks on a CPU")[1]
  assert ("had 50.1% test after 128,000 images (the laptop budget), first passed 55% after "
          "448,000 images (2.8 epochs), and reached 78.1% after 20 epochs (2.8 h;") in body


def test_squares_are_their_own_column_never_lras_pathfinder_with_the_rank_correlation(tmp_path):
  """Pathfinder on squares (not LRA's task) gets its own column beside LRA's Pathfinder, on the
  same line as the mixer's other CPU runs; own blocks get their own line; under the table,
  Spearman's rho between the squares column and the published (1,024-pixel) Pathfinder column,
  here computed by hand from the published numbers the line shows."""
  from lra.report import tables
  res = tmp_path / "results"
  write_run(res, "pathfinder", "softmax", "laptop", 0, 0.5005, chance=0.5, majority=0.5)
  ours = {"softmax": 0.70, "latte": 0.76, "linear": 0.72, "performer": 0.60}
  for mixer, accuracy in ours.items():
    write_run(res, "pathfinder", mixer, "squares", 0, accuracy, chance=0.5, majority=0.5)
  write_run(res, "pathfinder", "s5", "squares_published", 0, 0.80, chance=0.5, majority=0.5)
  body = tables.build(res)["tables/lra.md"].split("## Ours: the LRA tasks on a CPU")[1]
  assert ("| mixer | block | Pathfinder | published | Pathfinder, 4x4 squares | published "
          "(1,024 pixels) |") in body
  assert "| softmax | common block | 50.05 ‡ | 71.40 (last step) | 70.00 |" in body
  assert "| s5 | own block |  |  | 80.00 |" in body
  published = {}
  for line in body.splitlines():
    cells = [c.strip() for c in line.strip("|").split("|")]
    if cells[0] in ours and cells[1] == "common block" and cells[5]:
      published[cells[0]] = float(cells[5].split()[0])
  assert len(published) >= 3
  names = sorted(published)
  rank = lambda values: {v: sorted(values).index(v) + 1 for v in values}  # noqa: E731 (no ties)
  ro, rp = rank([ours[n] for n in names]), rank([published[n] for n in names])
  d2 = sum((ro[ours[n]] - rp[published[n]]) ** 2 for n in names)
  rho = 1 - 6 * d2 / (len(names) * (len(names) ** 2 - 1))
  assert (f"over the {len(names)} mixers with both: {rho:+.2f}") in body
  # S5's own block (squares_published) counts beside its own block's published row, apart.
  assert f"over {len(names) + 1} with S5's and Mega-Chunk's own blocks" in body
  assert "NOT LRA's Pathfinder" in body


def test_the_committed_readme_status_starts_each_sentence_with_a_capital():
  """The short status is phrases joined into sentences; a count that opens a sentence after the
  summary words ("... rank them. All 19 built-in mixers complete") is capitalised."""
  import re
  from lra.report import table_status
  text = (ROOT / "README.md").read_text()
  start, end = (text.index(m) for m in table_status.README_MARKERS)
  assert not re.findall(r"\. [a-z]\w*", text[start:end])


def test_the_status_is_written_from_the_runs_and_reads_well_with_any_number_of_rows(tmp_path):
  """`lra table --committed` writes the README's short status and docs/status.md's block from the
  runs and the ledger: ListOps' range among the mixers that learn, the squares column's count and
  ends with its rank correlation (with no row, one, then three), the synthetic runs at default
  and at other settings, the ledger's next row at its cost. A run added makes both stale."""
  from lra.report import ledger, table_status
  res = tmp_path / "results"
  readme = tmp_path / "README.md"
  readme.write_text(f"# x\n\n{table_status.README_MARKERS[0]}\n{table_status.README_MARKERS[1]}\n\n"
                    f"{tables.README_START}\n{tables.README_END}\n")
  page = tmp_path / table_status.PAGE
  page.parent.mkdir()
  prose = "# Status\n\nHand-written.\n\n"
  page.write_text(f"{prose}{table_status.PAGE_MARKERS[0]}\n{table_status.PAGE_MARKERS[1]}\n"
                  "\nMore.\n")
  res.mkdir()
  first = ledger.load(ROOT / "results" / "ledger.json")[0]  # Latte's ListOps paper row
  (res / "ledger.json").write_text(json.dumps({"rows": [first]}))
  listops = {"softmax": 0.365, "latte": 0.3465, "linear": 0.162}  # linear: the majority class
  for mixer, accuracy in listops.items():
    write_run(res, "listops", mixer, "laptop", 0, accuracy, majority=0.17, wall_time_s=2400.0)
  write_run(res, "synthetic", "latte", "paper", 0, 1.0, chance=0.0625, majority=0.07)
  write_run(res, "synthetic", "reformer", "paper", 0, 0.24, chance=0.0625, majority=0.07)
  write_run(res, "synthetic", "longformer", "paper", 0, 1.0, chance=0.0625, majority=0.07,
            run="paper+mixers.longformer.num_global=1_seed0")

  def status():
    tables.write(res, readme)
    text = readme.read_text()
    start, end = (text.index(m) for m in table_status.README_MARKERS)
    return text[start:end], page.read_text()

  short, full = status()
  assert full.startswith(prose) and full.endswith("\nMore.\n")  # the prose stays as written
  assert ("all 19 built-in mixers" not in short
          and "3 of the 19 built-in mixers complete; the 2 that learn end at 34.65-36.50% test"
          in short and "linear stays within a point of chance" in short)
  assert "34.65% (latte) to 36.50% (softmax)" in full and "40 min each" in full
  assert "none of the 19 built-in mixers has a complete run yet" in short
  assert "needs 3 mixers with both, 0 so far" in short
  assert ("at their default settings 1 mixers reach 100% test" in full
          and "1 do not: reformer 24.00%" in full)
  assert "No run at its default settings: longformer." in full
  assert "longformer with `mixers.longformer.num_global=1`: 100.00%" in full
  cost, h200 = ledger.minutes(first, "h200"), first["cost"]["h200"]
  # Its steps at the measured rate and its evaluations (75,000 at 75 steps/s and 14 s: ~17 min).
  assert cost == pytest.approx((first["steps"] / h200["steps_per_s"] + h200["eval_s"]) / 60)
  assert ("the ledger's next, `lra run listops latte --preset paper`, takes "
          f"~{cost:.0f} min on an H200, measured") in short
  assert ("0 of 1 complete; the next," in full
          and f"at {h200['steps_per_s']:g} steps/s, measured" in full)
  assert "any training on Text, Retrieval, Image, Pathfinder or Path-X" in short

  write_run(res, "pathfinder", "latte", "squares", 0, 0.70, chance=0.5, majority=0.5)
  assert {readme, page} <= set(tables.check(res, readme))  # a new run: both blocks are stale
  short, full = status()
  assert "1 of the 19 built-in mixers complete so far: latte 70.00%." in short
  assert "needs 3 mixers with both, 1 so far" in short
  assert "any training on Text, Retrieval, Image or Path-X" in short  # squares counts as training

  for mixer, accuracy in (("softmax", 0.60), ("performer", 0.65)):
    write_run(res, "pathfinder", mixer, "squares", 0, accuracy, chance=0.5, majority=0.5)
  short, full = status()
  assert "3 of the 19 built-in mixers complete so far, from 60.00% (softmax) to 70.00% (latte)" \
      in short
  # Published Pathfinder: softmax 71.40 < latte 75.61 < performer 77.05; ours: softmax < performer
  # < latte, so d = (0, 1, -1) and rho = 1 - 6 * 2 / (3 * 8) = +0.50.
  assert "between the squares column and the published Pathfinder column, over the 3 mixers " \
      "with both: +0.50." in short
  assert "latte 70.00%, performer 65.00%, softmax 60.00% test at the best validation step" in full
  assert tables.check(res, readme) == []

  # Seeds: a mean hides a seed that never left chance, so both blocks give the seeds' ends.
  for seed, accuracy in ((1, 0.80), (2, 0.504)):
    write_run(res, "pathfinder", "latte", "squares", seed, accuracy, chance=0.5, majority=0.5)
  short, full = status()
  assert "from 60.00% (softmax) to 66.80% (latte); across seeds: latte 50.40-80.00% " \
      "(3 seeds)" in short
  assert "latte 66.80% (mean of 3 seeds: 50.40-80.00%), performer 65.00%" in full
  csv_rows = read_csv(res / "tables" / "pathfinder.csv")
  latte = next(r for r in csv_rows if r["mixer"] == "latte" and r["preset"] == "squares")
  assert (float(latte["test_accuracy_min"]), float(latte["test_accuracy_max"])) == (50.4, 80.0)
  # Seeds that end alike say so, rather than a "range" of one number.
  for seed in (1, 2):
    write_run(res, "pathfinder", "performer", "squares", seed, 0.65, chance=0.5, majority=0.5)
  short, full = status()
  assert "latte 50.40-80.00% (3 seeds)" in short and "performer 65.00% (3 seeds)" in short
  assert "performer 65.00% (all 3 seeds)" in full


def test_the_readme_status_says_what_its_figures_mean_before_them(tmp_path):
  """Issue 80: each line of the README's short status opens with what its figures mean, in plain
  words that the figures themselves decide (docs/status.md's block keeps the figures alone)."""
  from lra.report import table_status, tables
  res = tmp_path / "results"
  for mixer, accuracy in {"softmax": 0.365, "latte": 0.3465, "performer": 0.355}.items():
    write_run(res, "listops", mixer, "laptop", 0, accuracy, majority=0.17)
  # Ours: softmax > latte (the mean of a seed that learns and one at chance) > performer; the
  # published Pathfinder column has them the other way round.
  for mixer, accuracy in {"softmax": 0.75, "latte": 0.80, "performer": 0.60}.items():
    write_run(res, "pathfinder", mixer, "squares", 0, accuracy, chance=0.5, majority=0.5)
  write_run(res, "pathfinder", "latte", "squares", 1, 0.504, chance=0.5, majority=0.5)

  def status():
    _, made = tables._build(res)  # pylint: disable=protected-access
    return table_status.Status(made["task_rows"], res)
  listops, squares = status().listops(brief=True), status().squares(brief=True)
  assert listops.index("every mixer that learns stops on the same plateau") < listops.index(
      "34.65-36.50%") and "so at this budget ListOps does not rank them" in listops
  assert squares.index("a seed can decide whether a mixer learns at all") < squares.index(
      "from 60.00% (performer)")
  assert "the mixers' order does not follow the published Pathfinder column" in squares
  assert "plateau" not in status().listops(brief=False)  # the page's prose says what they mean
  write_run(res, "listops", "linformer", "laptop", 0, 0.45, majority=0.17)
  assert "the mixers that learn end apart, so ListOps ranks them" in status().listops(brief=True)


def test_an_old_s5_config_is_the_bare_ssm_it_trained():
  """S5 configs written before `mixers.s5.activation` trained the bare SSM: they depart from
  today's `laptop` preset (S5's output layer), resume with the setting named, and read back
  (lra eval, tables) as that."""
  from lra.runs import run_identity
  from lra.runs.command import run_config
  from lra.runs.config_loading import resolve_config
  from lra.runs.pack import resume_command
  today = resolve_config("listops", "s5", "laptop").to_dict()
  assert today["mixers"]["s5"]["activation"] == "half_glu1"
  old = json.loads(json.dumps(today))
  del old["mixers"]["s5"]["activation"]
  assert run_identity.departures(old, today) == ["mixers.s5.activation=none"]
  assert run_identity.run_name(old, today) == "laptop+mixers.s5.activation=none_seed0"
  assert run_identity.same_run(old, today, today) == ["it has mixers.s5.activation=none"]
  assert run_identity.as_trained(old)["mixers"]["s5"]["activation"] == "none"
  resumed = run_config(shlex.split(resume_command(old, Path("r")))[1:]).to_dict()
  assert resumed["mixers"]["s5"]["activation"] == "none"
  assert not run_identity.same_run(old, resumed, today)


@pytest.mark.parametrize("dtype, departs", [("bfloat16", True), ("float32", False)])
def test_performers_output_cast_is_a_departure_of_the_bf16_runs_made_before_it(dtype, departs):
  """Performer under bfloat16 fed its float32 kernel output to the output projection until the
  cast back came: a bf16 config from before it (no output_dtype) departs from today's preset and
  resumes uncast; a float32 one computed the same either way and keeps its name."""
  import jax
  import jax.numpy as jnp

  from lra.models.mixers.performer import PerformerMixer
  from lra.runs import run_identity
  from lra.runs.command import run_config
  from lra.runs.config_loading import resolve_config
  from lra.runs.pack import resume_command
  today = resolve_config("listops", "performer", "smoke", [f"model.dtype={dtype}"]).to_dict()
  old = json.loads(json.dumps(today))
  del old["mixers"]["performer"]["output_dtype"]
  expected = ["mixers.performer.output_dtype=float32"] if departs else []
  assert run_identity.departures(old, today) == expected
  resumed = run_config(shlex.split(resume_command(old, Path("r")))[1:]).to_dict()
  assert resumed["mixers"]["performer"]["output_dtype"] == ("float32" if departs else "input")
  assert not run_identity.same_run(old, resumed, today)
  x, mask = jnp.ones((1, 8, 16), jnp.bfloat16), jnp.ones((1, 8), bool)
  for output, kind in (("input", jnp.bfloat16), ("float32", jnp.float32)):
    layer = PerformerMixer(dim=16, num_heads=2, max_len=8, num_features=8, output_dtype=output)
    params = layer.init(jax.random.PRNGKey(0), x, mask, deterministic=True)
    params = jax.tree.map(lambda a: a.astype(jnp.bfloat16), params)  # as the encoder runs it
    assert layer.apply(params, x, mask, deterministic=True)[0].dtype == kind


def test_a_run_holds_only_the_settings_its_phase_reads(capsys):
  """A run from scratch reads no spt.* setting, a pretraining no classifier head: neither is part
  of its identity (S5's squares_published seed 1 stores an spt block and seed 0 none: a change of
  the preset's spt.pixel_levels must neither split them nor move seed 1), and a --config override
  of one is refused in one line naming the phase that reads it."""
  from lra.runs import run_identity
  from lra.runs.config_loading import resolve_config
  today = resolve_config("pathfinder", "s5", "squares_published").to_dict()
  seed1 = json.loads(json.dumps(today))
  seed1["spt"]["pixel_levels"] = 7  # as if the preset had changed since it ran
  seed0 = {k: v for k, v in today.items() if k != "spt"}
  assert run_identity.departures(seed1, today) == []
  assert run_identity.run_name(seed1, today) == run_identity.run_name(seed0, today)
  assert (run_identity.config_fingerprint(seed1, today)
          == run_identity.config_fingerprint(seed0, today))
  pre = resolve_config("listops", "latte", "smoke", ["objective=denoise"]).to_dict()
  headed = json.loads(json.dumps(pre))
  headed["model"]["head"] = "mlp"
  assert run_identity.departures(headed, pre) == []
  common = ["listops", "latte", "--preset", "smoke", "--dry-run"]
  for words, says in (
      (["run", *common, "--config.spt.mask_ratio=0.3", "--config.spt.loss=l1"],
       "a run from scratch does not read spt.mask_ratio; a self-pretraining run (lra pretrain) "
       "and a fine-tune (--init-from) do"),
      (["pretrain", *common, "--config.model.head=mlp"],
       "a self-pretraining run (lra pretrain) does not read model.head"),
      (["run", *common, "--config.spt.start.step=3"], "the start a fine-tune records")):
    assert main(words) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and says in err and "Traceback" not in err, err


def test_spt_rows_stand_in_their_own_column_and_pretraining_runs_in_no_table(tmp_path):
  """A fine-tune from self-pretraining (run name `squares+spt`) is a column of its own beside the
  from-scratch squares column, never averaged with it, with its own rank correlation and a
  status sentence; the pretraining run itself (objective denoise) is in no accuracy table."""
  from lra.report import table_status, tables
  res = tmp_path / "results"
  scratch = {"softmax": 0.70, "latte": 0.504, "linear": 0.504, "performer": 0.504}
  spt = {"softmax": 0.80, "latte": 0.75, "linear": 0.62, "performer": 0.504}
  for mixer, accuracy in scratch.items():
    write_run(res, "pathfinder", mixer, "squares", 0, accuracy, chance=0.5, majority=0.5)
  for mixer, accuracy in spt.items():
    config = {"task": "pathfinder", "preset": "squares", "model": {"mixer": mixer, "dim": 8},
              "mixers": {mixer: {}}, "train": {"num_steps": 20}, "spt": {"init_from": "x"}}
    write_run(res, "pathfinder", mixer, "squares", 0, accuracy, chance=0.5, majority=0.5,
              run="squares+spt_seed0", config=config)
    write_run(res, "pathfinder", mixer, "squares", 0, 0.9, run="squares+pretrain_seed0",
              config={**config, "objective": "denoise", "spt": {}}, objective="denoise")
  files, made = tables._build(res)  # pylint: disable=protected-access
  body = files["tables/lra.md"].split("## Ours: the LRA tasks on a CPU")[1]
  assert ("| Pathfinder, 4x4 squares | published (1,024 pixels) | Pathfinder, 4x4 squares, SPT "
          "|") in body
  assert "| softmax | common block | 70.00 | 71.40 (last step) | 80.00 |" in body
  assert "| latte | common block | 50.40 ‡ | 75.61 (best test) | 75.00 |" in body
  assert "squares+pretrain" not in files["tables/pathfinder.md"]
  assert "90.00" not in body
  status = table_status.Status(made["task_rows"], res).spt(brief=True)
  assert "of the 4 with a from-scratch row, 3 leave chance with SPT and 1 from scratch" in status
  # Where leaving chance says nothing (every ListOps row leaves it), the change in score does.
  assert "3 score higher with SPT (mean +11.55 points)" in status
  assert "between the squares SPT column and the published Pathfinder column, over the" in status
  assert "several seeds" not in status  # one seed each: nothing to say of seeds yet
  # Second seeds: Latte learns on both with SPT, not from scratch; softmax the other way round.
  for mixer, (before, after) in {"latte": (0.70, 0.78), "softmax": (0.72, 0.504)}.items():
    write_run(res, "pathfinder", mixer, "squares", 1, before, chance=0.5, majority=0.5)
    config = {"task": "pathfinder", "preset": "squares", "model": {"mixer": mixer, "dim": 8},
              "mixers": {mixer: {}}, "train": {"num_steps": 20, "seed": 1},
              "spt": {"init_from": "x"}}
    write_run(res, "pathfinder", mixer, "squares", 1, after, chance=0.5, majority=0.5,
              run="squares+spt_seed1", config=config)
  _, made = tables._build(res)  # pylint: disable=protected-access
  status = table_status.Status(made["task_rows"], res).spt(brief=True)
  assert ("of the 2 run on several seeds, every seed learns for 1 with SPT (latte) and 1 from "
          "scratch (softmax)") in status


def test_one_spt_pair_on_a_preset_is_told_by_its_two_scores(tmp_path):
  """With a single SPT pair on a preset (the 1,024 pixels: Latte only), the status names the
  mixer and its two scores instead of counts of one, and says when both sit at chance."""
  from lra.report import table_status, tables
  res = tmp_path / "results"
  write_run(res, "pathfinder", "latte", "laptop", 0, 0.4885, chance=0.5, majority=0.5)
  config = {"task": "pathfinder", "preset": "laptop", "model": {"mixer": "latte", "dim": 8},
            "mixers": {"latte": {}}, "train": {"num_steps": 20}, "spt": {"init_from": "x"}}
  write_run(res, "pathfinder", "latte", "laptop", 0, 0.4890, chance=0.5, majority=0.5,
            run="laptop+spt_seed0", config=config)
  _, made = tables._build(res)  # pylint: disable=protected-access
  status = table_status.Status(made["task_rows"], res).spt(brief=True)
  assert ("LRA's Pathfinder (`laptop`, 1,024 pixels): 1 mixer complete; latte 48.90% with SPT "
          "against 48.85% from scratch (at chance both ways)") in status
  assert "of the 1 with" not in status
  # A from-scratch row of several seeds says it is their mean, beside a single SPT seed.
  for seed, accuracy in ((1, 0.5050), (2, 0.4990)):
    write_run(res, "pathfinder", "latte", "laptop", seed, accuracy, chance=0.5, majority=0.5)
  _, made = tables._build(res)  # pylint: disable=protected-access
  status = table_status.Status(made["task_rows"], res).spt(brief=True)
  assert ("latte 48.90% with SPT against 49.75% (mean of 3 seeds: 48.85-50.50%) from "
          "scratch") in status


def test_fine_tunes_from_one_pretraining_are_one_experiment_whichever_version_recorded_it(
    tmp_path):
  """Seeds fine-tuned by two versions of the suite record their pretraining's fingerprint as each
  version computed it; while the pretraining folders are there, the tables group them by the
  fingerprint this code computes from those folders, so the seeds stay one experiment."""
  res = tmp_path / "results"
  ids = []
  for seed, recorded in ((0, "6d0372f1"), (1, "b4f69304")):  # an older version's id, then ours
    config = {"task": "pathfinder", "preset": "squares", "model": {"mixer": "latte", "dim": 8},
              "mixers": {"latte": {}}, "train": {"num_steps": 20, "seed": seed}}
    pre = write_run(res, "pathfinder", "latte", "squares", seed, 0.9, run=f"squares+pretrain_seed"
                    f"{seed}", config={**config, "objective": "denoise"}, objective="denoise")
    start = {"config_id": recorded, "run_dir": pre.relative_to(tmp_path).as_posix()}
    write_run(res, "pathfinder", "latte", "squares", seed, 0.8, run=f"squares+spt_seed{seed}",
              config={**config, "spt": {"init_from": start["run_dir"]}}, pretrained=start)
    ids.append(start)
  runs = results.load_runs(res, status="complete")
  tunes = runs[runs["run"].str.contains("spt")]
  assert tunes["config_id"].nunique() == 1, tunes[["run", "config_id"]]
  assert len(results.summarize(tunes)) == 1
  # With its pretraining gone, a fine-tune falls back on the id it recorded: the two split.
  shutil.rmtree(tmp_path / ids[0]["run_dir"])
  runs = results.load_runs(res, status="complete")
  assert runs[runs["run"].str.contains("spt")]["config_id"].nunique() == 2


def test_sweep_spt_plans_each_pretraining_before_its_fine_tune_and_chains_the_arrays(
    tmp_path, capsys):
  res = tmp_path / "results"
  jobs = sweep.plan(["listops"], ["latte", "softmax"], [0, 1], preset="smoke", results_dir=res,
                    spt=True)
  assert [(j.mixer, j.seed, j.phase) for j in jobs] == [
      (m, s, p) for m in ("latte", "softmax") for s in (0, 1) for p in ("pretrain", "spt")]
  for pre, tune in zip(jobs[::2], jobs[1::2]):
    assert pre.argv[0] == "pretrain" and pre.run_dir.name == f"smoke+pretrain_seed{pre.seed}"
    assert tune.argv[:2] == ("run", "listops") and tune.run_dir.name == f"smoke+spt_seed{pre.seed}"
    assert tune.argv[tune.argv.index("--init-from") + 1] == str(pre.run_dir)
  out = tmp_path / "spt.sbatch"
  assert main(["sweep", "--tasks", "listops", "--mixers", "latte", "softmax", "--seeds", "0", "1",
               "--preset", "smoke", "--spt", "--results-dir", str(res), "--emit", "slurm",
               "--out", str(out)]) == 0
  submit = out.read_text()
  assert "--dependency=aftercorr:" in submit and "sleep" not in submit
  assert subprocess.run(["bash", "-n", str(out)]).returncode == 0

  def commands(path):
    text = path.read_text()
    listing = text.split("set -euo pipefail")[1].split('echo "')[0]
    got = subprocess.run(["bash", "-c", listing.replace('cd "${SLURM_SUBMIT_DIR:-.}"', "")
                          + 'printf "%s\\n" "${COMMANDS[@]}"'], capture_output=True, text=True)
    return got.stdout.splitlines()
  # Array task i of the fine-tunes is the fine-tune of pretraining task i (aftercorr pairs them).
  pre, tune = (commands(tmp_path / f"spt.{name}.sbatch") for name in ("pretrain", "finetune"))
  assert len(pre) == len(tune) == 4
  for a, b in zip(pre, tune):
    mixer = a.split("-m lra pretrain listops ")[1].split()[0]
    seed = a.split("--config.train.seed=")[1].split()[0]
    assert b.split("-m lra run listops ")[1].split()[0] == mixer
    assert f"--init-from {res}/runs/listops/{mixer}/smoke+pretrain_seed{seed} " in b
    assert f"--config.train.seed={seed} " in b


def test_sweep_spt_gives_each_phase_the_settings_it_reads(tmp_path):
  """--spt: the pretraining's budget goes to the pretraining alone (its fine-tune is named for that
  start), the classifier's head to the fine-tune alone; without --spt an spt.* setting on a run
  from scratch is refused in one line."""
  res = tmp_path / "results"
  pre, tune = sweep.plan(["listops"], ["latte"], [0], preset="smoke", results_dir=res, spt=True,
                         overrides=["spt.pretrain_steps=5", "model.head=mlp"])
  assert "--config.spt.pretrain_steps=5" in pre.argv and "--config.model.head=mlp" not in pre.argv
  assert "--config.model.head=mlp" in tune.argv and "--config.spt.pretrain_steps=5" not in tune.argv
  assert pre.run_dir.name == "smoke+pretrain,train.num_steps=5_seed0"
  assert tune.run_dir.name == "smoke+spt,model.head=mlp,pretrain.train.num_steps=5_seed0"
  with pytest.raises(ValueError, match="a run from scratch does not read spt.pretrain_steps"):
    sweep.plan(["listops"], ["latte"], [0], preset="smoke", results_dir=res,
               overrides=["spt.pretrain_steps=5"])


def test_a_sweep_starts_no_fine_tune_from_an_unfinished_pretraining(tmp_path, capsys):
  """Each fine-tune follows its own pretraining (its folder), not any of the same (task, mixer,
  seed): with a grid, two pretrainings share those. A diverged one stops its fine-tune only."""
  res = tmp_path / "res"
  jobs = sweep.plan(["listops"], ["latte"], [0], preset="smoke", results_dir=res, data_dir=None,
                    spt=True, grid=["model.dropout=0.0,0.1"])
  assert [j.phase for j in jobs] == ["pretrain", "spt"] * 2
  bad, good = jobs[0].run_dir, jobs[2].run_dir
  for folder, status in ((bad, "diverged"), (good, "complete")):
    folder.mkdir(parents=True)
    (folder / "final.json").write_text(json.dumps({"status": status}))
  jobs = sweep.plan(["listops"], ["latte"], [0], preset="smoke", results_dir=res, data_dir=None,
                    spt=True, grid=["model.dropout=0.0,0.1"])
  assert [j.after for j in jobs[1::2]] == [bad, good]
  failed = sweep.run_jobs(jobs, python="true")  # `true` stands in for every started command
  assert failed == [jobs[1]]
  err = capsys.readouterr().err
  assert f"its pretraining {bad} is diverged" in err and "not started" in err


def test_sweep_and_the_ledger_leave_the_same_runs_stopped(tmp_path):
  """One meaning of stopped: a diverged or failed run is skipped by `lra sweep` as the ledger of
  paper rows skips it (rerunning would end it the same way)."""
  from lra.report import ledger
  res = tmp_path / "results"
  for seed, status in enumerate(("diverged", "failed", "interrupted")):
    write_run(res, "listops", "latte", "paper", seed, 0.3, status=status)
  states = [j.state for j in sweep.plan(["listops"], ["latte"], [0, 1, 2], preset="paper",
                                        results_dir=res)]
  assert states == ["diverged", "failed", "partial"]
  assert [s for s in states if s in ledger.STOPPED] == ["diverged", "failed"]


def test_sweep_grid_crosses_settings_each_named_by_its_values(tmp_path):
  """`--grid train.learning_rate=1e-3,5e-4` is every run once per value, each in a folder named by
  the value where it departs from the preset (seeds of one value share it), the product when
  several grids are given; a key set twice is refused."""
  res = tmp_path / "results"
  jobs = sweep.plan(["listops"], ["latte"], [0, 1], preset="smoke", results_dir=res,
                    grid=["train.learning_rate=0.003,0.0005", "model.dim=32,16"])
  names = sorted({j.run_dir.name.rsplit("_seed", 1)[0] for j in jobs})
  assert len(jobs) == 8 and names == [
      "smoke", "smoke+model.dim=16", "smoke+model.dim=16,train.learning_rate=0.0005",
      "smoke+train.learning_rate=0.0005"]  # 0.003 and 32 are the smoke preset's own values
  assert all(j.argv[-2:][0].startswith("--config.train.learning_rate=") for j in jobs)
  with pytest.raises(ValueError, match="train.learning_rate: set by both"):
    sweep.plan(["listops"], ["latte"], [0], preset="smoke", results_dir=res,
               grid=["train.learning_rate=1e-3"], overrides=["train.learning_rate=0.1"])
  with pytest.raises(ValueError, match="expected KEY=VALUE1,VALUE2"):
    sweep.grid_settings(["train.learning_rate"])


def test_sweep_refuses_a_grid_on_the_seed_and_values_that_make_one_run_twice(tmp_path, capsys):
  """`--seeds 0 1 --grid train.seed=3,4` planned four runs that were two (each command giving
  --config.train.seed twice), and `--grid train.learning_rate=1e-3,0.001` two jobs in one folder,
  which two array tasks would race for: each is one line, exit 2."""
  res = tmp_path / "results"
  common = ["sweep", "--tasks", "listops", "--mixers", "latte", "--preset", "smoke",
            "--results-dir", str(res)]
  assert main([*common, "--seeds", "0", "1", "--grid", "train.seed=3,4"]) == 2
  err = capsys.readouterr().err.strip()
  assert err.count("\n") == 0 and "seeds come from --seeds" in err, err
  assert main([*common, "--grid", "train.learning_rate=1e-3,0.001"]) == 2
  err = capsys.readouterr().err.strip()
  assert err.count("\n") == 0 and ("--grid values train.learning_rate=1e-3 and "
                                   "train.learning_rate=0.001 make the same run") in err, err
  assert main([*common, "--seeds", "0", "0"]) == 2
  assert "--seeds names seed 0 twice" in capsys.readouterr().err
  assert main([*common, "--grid", "train.learning_rate=1e-3,2e-3"]) == 0  # two runs: fine


def test_one_rounding_rule_for_every_report():
  """A mean that is 56.675 in percent and 0.56675 as a fraction prints the same everywhere."""
  from lra.report import status
  from lra.report.table_rules import decimals
  assert decimals(56.675) == decimals(0.56675 * 100) == "56.68" and decimals(-0.005) == "-0.01"
  assert status.cell([{"status": "complete", "test_accuracy": t} for t in (0.5, 0.6335)]) == (
      "56.68 (n=2)")


def test_the_locality_profile_is_local_attention_at_each_window_beside_full_attention(tmp_path):
  """docs/status.md's "what a local model reaches": one line per window Local Attention ran with
  (the preset's own block, and `mixers.local.block=N` runs), its share of the longest sequence,
  beside softmax of the same preset; a local run with other settings is not a window."""
  from lra.report import table_status, tables
  res = tmp_path / "results"
  for run, block, accuracy in (("laptop_seed0", 50, 0.30), ("laptop+mixers.local.block=8_seed0",
                                                              8, 0.20)):
    config = {"task": "listops", "preset": "laptop", "model": {"mixer": "local", "dim": 8},
              "mixers": {"local": {"block": block}}, "train": {"seed": 0, "num_steps": 20}}
    write_run(res, "listops", "local", "laptop", 0, accuracy, run=run, config=config,
              tokens=2000)
  write_run(res, "listops", "local", "laptop", 0, 0.9, run="laptop+train.learning_rate=0.1_seed0")
  write_run(res, "listops", "softmax", "laptop", 0, 0.37)
  page = table_status.Status(tables._build(res)[1]["task_rows"], res).locality()
  assert "| ListOps (`laptop`) | 8 | 0.4% | 20.00% | 37.00% | 10.00% |" in page
  assert "| ListOps (`laptop`) | 50 | 2.5% | 30.00% | 37.00% | 10.00% |" in page
  assert "90.00%" not in page  # a learning-rate run is not a window
  assert page.index("| 8 |") < page.index("| 50 |")
