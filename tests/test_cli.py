"""The `lra` command as a user meets it: listings, data commands and actionable errors."""
import argparse
import json

import pytest

from lra.cli import main
from lra.cli.entry import build_parser


def test_list_shows_all_tasks_mixers_and_presets(capsys):
  from lra.configs.common import CPU_PRESETS, PRESETS, PUBLISHED_PRESETS
  from lra.models.mixers import MIXERS
  assert main(["list"]) == 0
  out = capsys.readouterr().out
  for name in ("listops", "text", "retrieval", "image", "pathfinder", "pathx", *MIXERS):
    assert name in out
  # Every model of LRA's Table 1, the Latte family, Luna, S5, Mega-Chunk and the cheap linear one.
  assert "Mixers (19 built in):" in out and len(MIXERS) == 19
  presets = out.split("Presets", 1)[1]
  for preset in PRESETS + CPU_PRESETS + PUBLISHED_PRESETS:
    assert f"\n  {preset} " in presets
  laptop = next(line for line in presets.splitlines() if line.startswith("  laptop "))
  assert laptop.endswith("[listops, pathfinder]")  # the tasks whose config takes it


def test_list_and_the_mixers_page_say_where_defaults_differ_from_the_lra_rows(capsys):
  """A mixer beside an LRA row whose defaults are not that row's settings says so, setting by
  setting, in `lra list` and in docs/mixers.md; Longformer and BigBird run the row's settings."""
  from pathlib import Path

  from lra.cli.listing import lra_row_departures
  departures = lra_row_departures()
  assert departures["longformer"] == departures["bigbird"] == []
  assert "attend_across_buckets=False (LRA: True)" in departures["reformer"]
  assert departures["performer"] == ["kernel=softmax (LRA: relu)"]
  assert main(["list"]) == 0
  out = capsys.readouterr().out
  page = (Path(__file__).resolve().parents[1] / "docs" / "mixers.md").read_text()
  section = page.split("## Defaults and the published rows beside them")[1].split("\n## ")[0]
  for mixer, items in departures.items():
    for item in items:
      assert item in out, item
      key, value = item.split(" ")[0].split("=")
      row = next((line for line in section.splitlines() if line.startswith(f"| {mixer} |")), "")
      assert f"`{key}={value}`" in row, f"docs/mixers.md: {mixer}'s row lacks {key}={value}"


def test_bare_help_describes_the_demo_it_runs(capsys):
  with pytest.raises(SystemExit):
    main(["--help"])
  out = " ".join(capsys.readouterr().out.split())
  assert "results/local/runs/listops/latte/demo_seed0" in out and "demo (the default here)" in out
  assert "results/runs/TASK" not in out  # that is `lra run`'s folder, not the demo's


def test_dry_run_prints_each_value_with_its_source_and_trains_nothing(tmp_path, capsys,
                                                                      monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert main(["run", "listops", "latte", "--preset", "laptop", "--dry-run",
               "--data-dir", str(tmp_path / "data"), "--config.train.num_steps=100"]) == 0
  out = capsys.readouterr().out
  run_dir = "results/local/runs/listops/latte/laptop+train.num_steps=100_seed0"
  assert f"run folder: {run_dir} (new)" in out
  values = {}
  for line in out.splitlines():
    if line.startswith("  ") and " = " in line:
      key, rest = line.strip().split(" = ", 1)
      values[key] = rest.rsplit("  ", 1)[1].strip()
  assert values["train.num_steps"] == "command line"
  assert values["model.num_layers"] == "preset" and values["data.generator.max_depth"] == "preset"
  assert values["model.num_heads"] == "default" and values["mixers.latte.num_latents"] == "default"
  assert not any(k.startswith("mixers.softmax.") for k in values)  # not part of this run
  assert list(tmp_path.iterdir()) == []  # nothing generated, trained or written
  assert main(["--dry-run"]) == 0
  assert "results/local/runs/listops/latte/demo_seed0" in capsys.readouterr().out


def test_the_squares_dry_run_says_how_many_tokens_before_the_data_exists(tmp_path, capsys):
  """The data is not generated yet: the generator's settings say its length (1,024 pixels), so the
  dry run gives the number of tokens, not "the task's length / 16"."""
  assert main(["run", "pathfinder", "latte", "--preset", "squares", "--dry-run", "--data-dir",
               str(tmp_path / "data"), "--results-dir", str(tmp_path / "results")]) == 0
  out = capsys.readouterr().out
  assert "input: 64 tokens (4x4 squares of 1024 pixels)" in out, out[:800]


def test_a_dry_run_says_what_the_run_costs_where_a_speed_is_known(capsys):
  """`lra run pathfinder softmax --preset lra --dry-run` showed 62,400 steps of batch 512 and not
  what they cost: now each device the ledger knows, its speed, total time and source."""
  from lra.report import ledger
  from lra.report.results import committed_results_dir
  committed = committed_results_dir()
  if committed is None:
    pytest.skip("needs this repository's results/ledger.json")
  row = next(r for r in ledger.load(committed / "ledger.json")
             if r["command"] == "lra run pathfinder softmax --preset lra")
  assert main(["run", "pathfinder", "softmax", "--preset", "lra", "--dry-run"]) == 0
  out = capsys.readouterr().out
  assert f"cost of its {row['steps']:,} steps of batch 512, from the speeds known" in out
  h200 = row["cost"]["h200"]
  minutes = (row["steps"] / h200["steps_per_s"] + h200["eval_s"]) / 60
  line = next(x for x in out.splitlines() if x.startswith("  NVIDIA H200: "))
  assert line.startswith(f"  NVIDIA H200: ~{minutes:.0f} min (")
  assert f"at {h200['steps_per_s']:g} steps/s" in line and h200["source"] in line
  assert line.endswith(f"(results/ledger.json, row {row['id']})")
  assert any(x.startswith("  NVIDIA H100: ~") for x in out.splitlines())
  assert ("  any other device: no measured speed; `lra bench --epoch pathfinder --preset lra "
          "--mixers softmax` times an epoch on this machine") in out


def test_a_fine_tunes_dry_run_finds_its_committed_seeds_from_one_resolution(tmp_path, capsys,
                                                                             monkeypatch):
  """The dry run keys a fine-tune as the tables do (its recorded start included), so the three
  committed seeds of this command's config give its cost; and it resolves the command's config
  once, reading the committed runs' stored keys (results/tables/runs.csv) instead of resolving
  each run's preset (~219 configs before)."""
  from lra.report.results import committed_results_dir
  from lra.runs import config_loading
  if committed_results_dir() is None:
    pytest.skip("needs this repository's results/")
  resolved = []
  real = config_loading.load_config
  monkeypatch.setattr(config_loading, "load_config",
                      lambda *a, **k: resolved.append(a) or real(*a, **k))
  pretraining = "results/runs/pathfinder/latte/squares+pretrain_seed1"
  monkeypatch.chdir(committed_results_dir().parent)
  assert main(["run", "pathfinder", "latte", "--preset", "squares", "--init-from", pretraining,
               "--seed", "1", "--dry-run", "--results-dir", str(tmp_path)]) == 0
  out = capsys.readouterr().out
  assert "3 runs of this config in the repository's committed results" in out, out[:1500]
  assert "squares+spt_seed0, results/runs/pathfinder/latte/squares+spt_seed1" in out
  # The command's config, today's preset, and the preset of the pretraining it starts from.
  assert len(resolved) <= 3, resolved


def test_a_dry_run_reads_speeds_from_runs_and_bench_records_of_the_same_config(tmp_path, capsys):
  from lra.runs.config_loading import resolve_config
  from test_results_tables import write_run
  res = tmp_path / "results"
  args = ["run", "synthetic", "linear", "--preset", "smoke", "--results-dir", str(res),
          "--data-dir", str(tmp_path / "data"), "--dry-run"]
  assert main([*args, "--config.model.dim=24"]) == 0  # nothing known of this config yet
  out = capsys.readouterr().out
  assert ("cost of its 6 steps of batch 16: no measured speed of this config on any device; "
          "`lra bench --epoch synthetic --preset smoke --mixers linear --config.model.dim=24` "
          "times an epoch") in out
  config = resolve_config("synthetic", "linear", "smoke", ["model.dim=24"]).to_dict()
  for seed, wall, rate in ((3, 60.0, 0.25), (4, 90.0, 0.35)):  # two seeds of it, on 2 cores
    write_run(res, "synthetic", "linear", "smoke", seed, 0.5, config=config, num_steps=6,
              wall_time_s=wall, steps_per_s=rate, cpu_cores=2)
  write_run(res, "synthetic", "linear", "smoke", 0, 0.5, num_steps=6,  # another config
            config=resolve_config("synthetic", "linear", "smoke").to_dict(), wall_time_s=1.0)
  (res / "bench").mkdir()
  batching = {"padding": config["data"]["padding"], "quantum": config["data"]["pad_quantum"],
              "bucketing": config["data"]["bucketing"]}
  (res / "bench" / "epoch.json").write_text(json.dumps([{
      "setup": {"task": "synthetic", "mixer": "linear", "preset": "smoke",
                "overrides": ["model.dim=24"], "device": "cpu:cpu"},
      "modes": [{"mode": "fixed", "batching": batching, "steps": 30, "epoch_s": 60.0},
                {"mode": "other", "batching": {**batching, "quantum": 7}, "steps": 1,
                 "epoch_s": 1.0}]}]))
  assert main([*args, "--config.model.dim=24"]) == 0
  lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  cpu:cpu")]
  assert lines == [
      "  cpu:cpu (2 cores): ~1 min with evaluations, 0.30 steps/s: 2 runs of this config in "
      "your results (results/runs/synthetic/linear/smoke_seed3, results/runs/synthetic/linear/"
      "smoke_seed4; the median)",
      "  cpu:cpu: ~12 s of training, evaluations not counted, 0.50 steps/s: `lra bench --epoch` "
      f"record {res / 'bench' / 'epoch.json'} (fixed batching)"]


def test_unknown_names_say_so(capsys):
  assert main(["run", "listops", "nope"]) == 2
  assert "Valid mixers" in capsys.readouterr().err
  assert main(["run", "listopz", "latte"]) == 2
  assert "Valid tasks" in capsys.readouterr().err


def test_missing_data_gives_the_command(tmp_path, capsys):
  assert main(["run", "listops", "latte", "--data-dir", str(tmp_path)]) == 2
  assert "lra data generate listops" in capsys.readouterr().err


def test_generate_prepare_inspect(tmp_path, capsys):
  raw, data = tmp_path / "raw", tmp_path / "data"
  assert main(["data", "generate", "listops", "--out", str(raw), "--num-train", "20",
               "--num-val", "5", "--num-test", "5", "--min-length", "3", "--max-length", "30",
               "--max-depth", "3", "--seed", "1"]) == 0
  header = (raw / "basic_train.tsv").read_text().splitlines()[0]
  assert header == "Source\tTarget"
  assert main(["data", "prepare", "listops", "--source", str(raw), "--data-dir", str(data)]) == 0
  capsys.readouterr()
  assert main(["data", "inspect", "listops", "--split", "val", "--index", "1", "--json",
               "--data-dir", str(data)]) == 0
  record = json.loads(capsys.readouterr().out)
  source, label = (raw / "basic_val.tsv").read_text().splitlines()[2].split("\t")
  assert record["label"] == int(label)
  assert record["text"] == " ".join(w for w in source.split() if w not in "()")
  assert record["length"] == len(record["tokens"])
  assert main(["data", "inspect", "listops", "--split", "test", "--all", "--json",
               "--data-dir", str(data)]) == 0
  assert len(capsys.readouterr().out.splitlines()) == 5
  assert main(["data", "inspect", "listops", "--data-dir", str(data)]) == 0
  summary = json.loads(capsys.readouterr().out)
  assert summary["splits"] == {"train": 20, "val": 5, "test": 5} and summary["vocab_size"] == 16


@pytest.mark.parametrize("args, expected", [
    (["run", "listops", "latte", "--preset", "smoke", "--config.train.nope=1"], "not a config key"),
    (["run", "listops", "latte", "--preset", "smoke", "--config.train.num_steps=abc"],
     "--config.train.num_steps=abc: expected an integer, found 'abc' (current value 6)"),
    (["run", "listops", "latte", "--preset", "smoke", "--config.train.num_steps=2.5"],
     "--config.train.num_steps=2.5: expected an integer, found '2.5'"),
    (["run", "listops", "latte", "--preset", "smoke", "--config.train.learning_rate=fast"],
     "--config.train.learning_rate=fast: expected a number, found 'fast'"),
])
def test_bad_override_is_a_clear_error(tmp_path, capsys, args, expected):
  assert main(args + ["--data-dir", str(tmp_path)]) == 2
  err = capsys.readouterr().err
  assert expected in err and len(err.strip().splitlines()) == 1


def test_table_on_a_missing_folder_says_there_are_no_runs_and_creates_nothing(tmp_path, capsys):
  missing = tmp_path / "typo"
  assert main(["table", "--results-dir", str(missing)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and f"no runs under {missing}" in err[0]
  assert not missing.exists()


@pytest.mark.parametrize("lengths", ["0", "-5", "1024,0", "abc"])
def test_bench_refuses_lengths_below_one_in_one_line(lengths, tmp_path, capsys):
  assert main(["bench", f"--lengths={lengths}", "--mixers", "softmax"]) == 2
  out, err = capsys.readouterr()
  assert not out and err.strip() == (
      f"lra: error: --lengths {lengths}: expected sequence lengths >= 1 separated by commas, e.g. "
      "`lra bench --lengths 1024,2048`")


def test_bare_demo_trains_under_results_local(tmp_path, capsys, monkeypatch):
  """`lra` in a clone that already holds committed runs: the demo trains its own run under
  results/local/ and leaves results/runs/ alone (a stale committed run never blocks it)."""
  monkeypatch.chdir(tmp_path)
  results = tmp_path / "results"
  committed = results / "runs" / "listops" / "latte" / "smoke_seed0"
  committed.mkdir(parents=True)
  (committed / "config.json").write_text(json.dumps({"preset": "smoke", "stale": True}))
  assert main(["--preset", "smoke", "--quiet", "--data-dir", str(tmp_path / "data")]) == 0
  final = json.loads((results / "local" / "runs" / "listops" / "latte" / "smoke_seed0" /
                      "final.json").read_text())
  assert final["status"] == "complete" and final["mixer"] == "latte"
  assert "points over the majority class" in capsys.readouterr().out
  assert sorted(p.name for p in committed.iterdir()) == ["config.json"]


@pytest.mark.parametrize("argv", [
    ["data", "prepare", "text", "--source", "s"],
    ["data", "inspect", "listops"],
    ["run", "listops", "latte"],
    ["sweep", "--tasks", "listops", "--mixers", "latte"],
])
def test_the_demos_options_before_a_command_are_refused_not_passed_on(argv, capsys):
  """`lra --data-dir D data prepare ...` once wrote to ~/.cache/lra: the subcommand's own default
  replaced the top-level flag. The top level's options are the demo's alone now: before a command
  they are refused in one line that says where they go; after it, they are the command's."""
  from pathlib import Path

  assert main(["--data-dir", "/top", *argv]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and f"--data-dir before `{argv[0]}`" in err
  assert f"lra {argv[0]} ... --data-dir VALUE" in err
  parser = build_parser()
  assert parser.parse_args([*argv, "--data-dir", "/sub"]).data_dir == Path("/sub")
  assert parser.parse_args(argv).data_dir is None


def test_every_subcommand_default_is_its_own():
  """The generators' --seed (default 0) once parsed as None, the top level's (a run's) default:
  ListOps came out unseeded, different on each machine, and Pathfinder failed. No command shares
  an option with the top level now, so each default holds; a top-level --seed before a command is
  refused."""
  parser = build_parser()
  for generator in ("listops", "pathfinder"):
    assert parser.parse_args(["data", "generate", generator, "--out", "o"]).generator_seed == 0
    assert parser.parse_args(["data", "generate", generator, "--out", "o",
                              "--seed", "2"]).generator_seed == 2
    assert main(["--seed", "5", "data", "generate", generator, "--out", "o"]) == 2
  assert parser.parse_args(["run", "listops", "latte"]).preset == "paper"
  assert parser.parse_args([]).demo_preset is None  # the demo's, named apart


def test_generators_are_seeded_without_a_seed_flag(tmp_path):
  """`lra data generate listops|pathfinder` without --seed writes seed 0's files."""
  small = ["--num-train", "6", "--num-val", "2", "--num-test", "2", "--min-length", "3",
           "--max-length", "30", "--max-depth", "3"]
  for name, extra in (("a", []), ("b", ["--seed", "0"])):
    assert main(["data", "generate", "listops", "--out", str(tmp_path / name), *small,
                 *extra]) == 0
  assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
             for f in ("basic_train.tsv", "basic_val.tsv", "basic_test.tsv"))
  assert main(["data", "generate", "pathfinder", "--out", str(tmp_path / "pf"),
               "--num-images", "4"]) == 0
  assert list((tmp_path / "pf").rglob("*.png"))


def test_dry_run_sources_hold_for_every_task():
  """Every task's config starts from configs/<task>.py:defaults (where `default` is read), so
  the smoke preset's one-layer model shows as `preset` and an override as `command line`; a run
  from scratch lists no spt.* setting (it reads none), a fine-tune its recorded start."""
  from lra.report import dry_run
  from lra.runs.config_loading import reference_config, resolve_config
  from lra.tasks import TASKS
  for task in TASKS:
    config = resolve_config(task, "latte", "smoke", ["train.seed=3"])
    rows = {key: source for key, _, source in dry_run.sources(
        config, reference_config(config.to_dict()).to_dict())}
    assert rows["model.num_layers"] == "preset", task
    assert rows["train.seed"] == "command line" and rows["eval.batch_size"] != "command line", task
    assert "default" in rows.values(), task
    assert not any(key.startswith("spt.") for key in rows), task
  tune = resolve_config("listops", "latte", "smoke", ["spt.init_from=somewhere"])
  rows = {key: source for key, _, source in dry_run.sources(
      tune, reference_config(tune.to_dict()).to_dict())}
  assert rows["spt.start.config_id"] == "command line" and rows["spt.mask_ratio"] == "preset"


def test_every_subcommand_page_opens_with_what_it_does():
  """`lra pack --help` once showed only its usage: each page now opens with its one-line help."""
  def pages(parser, path=()):
    for action in parser._actions:  # pylint: disable=protected-access
      if isinstance(action, argparse._SubParsersAction):  # pylint: disable=protected-access
        for name, sub in action.choices.items():
          yield (*path, name), sub
          yield from pages(sub, (*path, name))
  missing = [" ".join(path) for path, sub in pages(build_parser()) if not sub.description]
  assert not missing, f"subcommands whose --help has no description: {missing}"


@pytest.mark.parametrize("generator", ["listops", "pathfinder"])
def test_every_generator_option_says_what_it_sets_and_its_default(generator):
  """`lra data generate listops --help` once described none of --min-length, --max-depth,
  --max-args, ...: every option now has a help text, which names its default where it has one."""
  # pylint: disable=protected-access
  parser = build_parser()
  for name in ("data", "generate", generator):
    parser = next(a for a in parser._actions
                  if isinstance(a, argparse._SubParsersAction)).choices[name]
  options = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
  assert len(options) >= 7
  silent = [a.option_strings[0] for a in options if not (a.help or "").strip()]
  assert not silent, f"lra data generate {generator}: options without help: {silent}"
  for action in options:
    if action.default is not None and action.default is not False:
      assert "default" in action.help, (action.option_strings[0], action.help)


def test_your_results_folder_is_lra_results_dir_or_results_local_where_you_run(
    tmp_path, monkeypatch, capsys):
  """One folder a user can predict: $LRA_RESULTS_DIR when set, else results/local under the
  working folder; a run's folder is named whole."""
  from lra.cli import main
  monkeypatch.chdir(tmp_path)
  monkeypatch.delenv("LRA_RESULTS_DIR", raising=False)
  assert main(["run", "listops", "latte", "--preset", "smoke", "--dry-run"]) == 0
  assert "run folder: results/local/runs/listops/latte/smoke_seed0" in capsys.readouterr().out
  monkeypatch.setenv("LRA_RESULTS_DIR", str(tmp_path / "mine"))
  assert main(["run", "listops", "latte", "--preset", "smoke", "--dry-run"]) == 0
  assert f"run folder: {tmp_path / 'mine'}/runs/listops/latte/smoke_seed0" in (
      capsys.readouterr().out)
