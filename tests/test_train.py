"""A few training steps end to end: the run directory, its contents, and the eval weighting."""
import json

import jax
import ml_collections
import numpy as np
import pytest

from lra.models.build import build_model
from lra import run
from lra.training import train
from lra.base import progress
from lra.runs.config_loading import apply_overrides, data_cache_dir, load_config
from lra.runs.writers import read_metrics
from lra.tasks.contract.batches import eval_batches
from lra.tasks.contract.cache import PreparedData


def _smoke_cache(data_dir):
  return data_cache_dir(load_config("listops", "smoke"), data_dir)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
  root = tmp_path_factory.mktemp("run")
  result = run.run("listops", "softmax", preset="smoke", data_dir=root / "data",
                   run_dir=root / "run", progress=False,
                   overrides=["train.num_steps=4", "eval.every_steps=2", "train.log_every_steps=1"])
  return root, result


def test_run_directory_is_complete_and_consistent(smoke_run):
  root, result = smoke_run
  run_dir = root / "run"
  final = json.loads((run_dir / "final.json").read_text())
  assert {**final, "run_dir": str(run_dir)} == json.loads(json.dumps(result))
  assert final["status"] == "complete" and final["step"] == 4
  assert final["mixer"] == "softmax" and final["task"] == "listops"
  for key in ("val_accuracy", "test_accuracy", "test_accuracy_last", "majority_accuracy"):
    assert 0.0 <= final[key] <= 1.0
  assert final["chance_accuracy"] == pytest.approx(0.1)
  assert final["best_step"] in (2, 4)
  assert final["device"].startswith(jax.devices()[0].platform)
  assert final["git_sha"] and final["versions"]["jax"] == jax.__version__
  # Which softmax ran, at which matmul precision (smoke: f32, one piece; on a CPU: full f32).
  assert final["execution_path"] == "einsum (one piece)" and final["matmul_precision"] == "default"
  config = json.loads((run_dir / "config.json").read_text())
  assert config["model"]["mixer"] == "softmax" and config["train"]["num_steps"] == 4
  rows = read_metrics(run_dir / "metrics.jsonl")
  assert [r["step"] for r in rows if "train/loss" in r] == [1, 2, 3, 4]
  assert [r["step"] for r in rows if "val/accuracy" in r] == [2, 4]
  assert all(np.isfinite(r["train/loss"]) for r in rows if "train/loss" in r)
  # The parameter count is the model's as rebuilt from config.json.
  data = PreparedData(_smoke_cache(root / "data"))
  model = build_model(ml_collections.ConfigDict(config), data.spec)
  params = model.init(jax.random.PRNGKey(0), train.example_batch(data.spec, 1),
                      deterministic=True)
  assert final["num_params"] == sum(x.size for x in jax.tree.leaves(params))


def test_rerunning_a_complete_run_does_not_train_again(smoke_run):
  root, result = smoke_run
  again = run.run("listops", "softmax", preset="smoke", data_dir=root / "data",
                  run_dir=root / "run", progress=False,
                  overrides=["train.num_steps=4", "eval.every_steps=2", "train.log_every_steps=1"])
  assert again == json.loads(json.dumps(result))
  with pytest.raises(FileExistsError, match="another run"):
    run.run("listops", "softmax", preset="smoke", data_dir=root / "data", run_dir=root / "run",
            progress=False, overrides=["train.num_steps=5"])
  # Another seed in the same folder is another run too (run names carry the seed; --run-dir not).
  base = ["train.num_steps=4", "eval.every_steps=2", "train.log_every_steps=1"]
  with pytest.raises(FileExistsError, match="train.seed"):
    run.run("listops", "softmax", preset="smoke", data_dir=root / "data", run_dir=root / "run",
            progress=False, overrides=[*base, "train.seed=7"])


def test_eval_batches_count_every_example_once(smoke_run):
  root, _ = smoke_run
  data = PreparedData(_smoke_cache(root / "data"))
  arrays = data.split("test")
  batches = list(eval_batches(arrays, data.spec, 24))  # 64 examples -> 24 + 24 + 16 (+8 filler)
  assert sum(b["weight"].sum() for b in batches) == len(arrays["label"])
  assert all(b["inputs"].shape == (24, data.spec.seq_len) for b in batches)
  labels = np.concatenate([b["label"][b["weight"] > 0] for b in batches])
  np.testing.assert_array_equal(labels, arrays["label"])
  assert (batches[0]["mask"] == (batches[0]["inputs"] != 0)).all()


def test_evaluations_can_read_the_first_examples_of_each_split(smoke_run):
  """eval.max_examples: the first N of val and test (the same N at every evaluation), scored
  exactly as the whole split's first N would be."""
  root, _ = smoke_run
  result = run.run("listops", "softmax", preset="smoke", data_dir=root / "data",
                   run_dir=root / "subset", progress=False,
                   overrides=["train.num_steps=2", "eval.max_examples=5"])
  rows = [r for r in read_metrics(root / "subset" / "metrics.jsonl") if "val/accuracy" in r]
  assert rows and all(r["val/num_examples"] == r["test/num_examples"] == 5 for r in rows)
  data = PreparedData(_smoke_cache(root / "data"))
  assert data.num_examples("test") > 5
  # Accuracy over 5 examples is a multiple of 1/5.
  assert result["test_accuracy"] * 5 == pytest.approx(round(result["test_accuracy"] * 5))


def test_overrides_are_typed_and_unknown_keys_fail():
  config = load_config("listops", "smoke")
  apply_overrides(config, ["train.num_steps=7", "train.learning_rate=0.5", "model.pooling=cls"])
  assert (config.train.num_steps, config.train.learning_rate, config.model.pooling) == (
      7, 0.5, "cls")
  with pytest.raises(KeyError, match="Valid keys here"):
    apply_overrides(config, ["train.num_stepz=3"])
  with pytest.raises(ValueError, match="train.num_steps"):
    apply_overrides(config, ["train.num_steps=many"])


def test_every_preset_loads_locked():
  for preset in ("paper", "lra", "smoke", "demo"):
    config = load_config("listops", preset)
    with pytest.raises(AttributeError):
      config.train.not_a_key = 1
  with pytest.raises(ValueError, match="Valid presets"):
    load_config("listops", "huge")


def test_generated_data_has_a_cache_per_recipe(tmp_path):
  demo = load_config("listops", "demo")
  again = load_config("listops", "demo")
  apply_overrides(again, ["train.num_steps=5"])  # not a data setting: same cache
  deeper = load_config("listops", "demo")
  apply_overrides(deeper, ["data.generator.max_depth=6"])
  assert data_cache_dir(demo, tmp_path) == data_cache_dir(again, tmp_path)
  assert data_cache_dir(deeper, tmp_path) != data_cache_dir(demo, tmp_path)
  assert data_cache_dir(demo, tmp_path).name.startswith("listops_demo-")
  # Prepared (not generated) data keeps its plain folder: `lra data prepare` writes there.
  assert data_cache_dir(load_config("listops", "paper"), tmp_path) == tmp_path / "listops"


def test_a_new_config_key_leaves_an_old_run_resumable(tmp_path, monkeypatch):
  """Run identity is the departure from the preset: a key added later (with a default) neither
  orphans a run folder nor renames it."""
  from lra.configs import common
  overrides = ["train.num_steps=4", "eval.every_steps=2", "train.log_every_steps=1",
               "checkpoint.every_steps=2"]
  kwargs = dict(preset="smoke", data_dir=tmp_path / "data", results_dir=tmp_path / "results",
                progress=False, overrides=overrides)
  first = run.run("listops", "softmax", **kwargs)
  run_dir = tmp_path / "results" / "runs" / "listops" / "softmax"
  (run_dir,) = run_dir.iterdir()
  # Make it a run stopped at step 2, as a kill after the step-2 checkpoint would leave it.
  import shutil
  shutil.rmtree(run_dir / "checkpoints" / "4")
  (run_dir / "final.json").write_text(json.dumps({**first, "status": "running"}))
  kept = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["step"] <= 2]
  base_config = common.base_config

  def with_a_new_key(*args, **kw):
    config = base_config(*args, **kw)
    config.train.new_setting = 0.0  # a setting added after the run was made
    return config
  monkeypatch.setattr(common, "base_config", with_a_new_key)
  again = run.run("listops", "softmax", **kwargs)
  assert sorted(p.name for p in run_dir.parent.iterdir()) == [run_dir.name]
  assert again["status"] == "complete" and again["step"] == 4
  for key in ("best_step", "val_accuracy", "test_accuracy", "best_test_accuracy",
              "test_accuracy_last"):
    assert again[key] == first[key], key
  assert json.loads((run_dir / "config.json").read_text())["train"]["new_setting"] == 0.0
  rows = read_metrics(run_dir / "metrics.jsonl")
  # Resumed, not restarted: the lines up to step 2 (timings included) are the first run's.
  assert [r for r in rows if r["step"] <= 2] == kept
  assert [r["step"] for r in rows if "train/loss" in r] == [1, 2, 3, 4]


def test_eval_reproduces_both_reported_scores(smoke_run, capsys):
  """`lra eval` on the best checkpoint gives final.json's test accuracy at the best val step;
  on the last checkpoint, the last step's."""
  from lra.cli import main
  root, result = smoke_run
  run_dir = root / "run"
  for checkpoint, key in (("best", "test_accuracy"), ("last", "test_accuracy_last")):
    assert main(["eval", str(run_dir), "--checkpoint", checkpoint, "--split", "test",
                 "--data-dir", str(root / "data")]) == 0
    record = read_metrics(run_dir / "evals.jsonl")[-1]
    assert record["checkpoint"] == checkpoint and record["split"] == "test"
    assert record["test/accuracy"] == pytest.approx(result[key], abs=1e-6)
    assert f"{100 * result[key]:.2f}%" in capsys.readouterr().out
  assert main(["eval", str(root), "--data-dir", str(root / "data")]) == 2
  assert "not a run directory" in capsys.readouterr().err


def test_eval_saves_the_predicted_class_of_every_example(smoke_run, tmp_path):
  """`lra eval --predictions F`: one class per test example, in the cache's order; scored against
  the cache's labels they give the accuracy the run reported (the batches' index bookkeeping
  under length buckets: tests/test_batching.py)."""
  from lra.cli import main
  root, result = smoke_run
  out = tmp_path / "predicted"
  assert main(["eval", str(root / "run"), "--split", "test", "--predictions", str(out),
               "--data-dir", str(root / "data")]) == 0
  predicted = np.load(out)
  labels = np.asarray(PreparedData(_smoke_cache(root / "data")).split("test")["label"])
  assert predicted.shape == labels.shape and predicted.dtype == np.int32
  assert ((predicted >= 0) & (predicted < 10)).all()
  assert np.mean(predicted == labels) == pytest.approx(result["test_accuracy"], abs=1e-6)


def test_diff_names_what_differs(smoke_run, tmp_path, capsys):
  import shutil
  from lra.cli import main
  root, _ = smoke_run
  a, b = root / "run", tmp_path / "other"
  shutil.copytree(a, b, ignore=shutil.ignore_patterns("checkpoints"))
  config = json.loads((b / "config.json").read_text())
  config["train"]["learning_rate"] = 0.5
  (b / "config.json").write_text(json.dumps(config))
  final = json.loads((b / "final.json").read_text())
  final["git_sha"], final["versions"]["jax"] = "0" * 40, "0.0.1"
  final["steps_per_s"], final["test_accuracy"] = 5.272916045760012, 0.12345
  (b / "final.json").write_text(json.dumps(final))
  assert main(["diff", str(a), str(b)]) == 0
  out = capsys.readouterr().out
  assert "config train.learning_rate" in out and "B: 0.5" in out
  assert "code git_sha" in out and "versions versions.jax" in out
  assert "device" not in out
  # Numbers as the reports print them: accuracies in %, speeds to four digits, never raw floats.
  assert "B: 12.35%" in out and "B: 5.273" in out and "5.27291604" not in out
  assert main(["diff", str(a), str(a)]) == 0
  assert "no differences" in capsys.readouterr().out


def test_a_run_dir_without_checkpoints_starts_again_and_says_so(tmp_path, capsys):
  """A committed partial run on a fresh machine has its curve but no checkpoint (not in git)."""
  import shutil
  kwargs = dict(preset="smoke", data_dir=tmp_path / "data", run_dir=tmp_path / "run",
                progress=False, overrides=["train.num_steps=4", "eval.every_steps=2",
                                           "train.log_every_steps=1", "checkpoint.every_steps=2"])
  first = run.run("listops", "softmax", **kwargs)
  run_dir = tmp_path / "run"
  shutil.rmtree(run_dir / "checkpoints")
  (run_dir / "final.json").write_text(json.dumps({**first, "status": "running"}))
  capsys.readouterr()
  again = run.run("listops", "softmax", **kwargs)
  assert "reached step 4 but holds no checkpoint" in capsys.readouterr().err
  assert again["status"] == "complete"
  for key in ("val_accuracy", "test_accuracy", "best_test_accuracy", "test_accuracy_last"):
    assert again[key] == first[key], key  # seeded: the same run again, from step 0
  rows = read_metrics(run_dir / "metrics.jsonl")
  assert [r["step"] for r in rows if "train/loss" in r] == [1, 2, 3, 4]  # replaced, not appended


def _git(cwd, *args):
  import subprocess
  subprocess.run(["git", "-c", "user.name=lra-test", "-c", "user.email=lra@test", *args],
                 cwd=cwd, check=True, capture_output=True)


def test_a_partial_run_carried_through_git_resumes_on_the_clone(tmp_path, monkeypatch, capsys):
  """docs/runs.md, "Run folders": stop, `git add -f` the newest checkpoint and best/, commit; the
  same command on a clone (another absolute path) resumes there and ends as an uninterrupted run."""
  import os
  import shutil
  import signal
  from pathlib import Path
  from lra.runs import checkpoints

  overrides = ["train.num_steps=8", "eval.every_steps=2", "train.log_every_steps=1",
               "checkpoint.every_steps=2", "checkpoint.keep=2"]
  data_dir = tmp_path / "data"
  reference = run.run("listops", "softmax", preset="smoke", data_dir=data_dir,
                      run_dir=tmp_path / "clean", progress=False, overrides=overrides)

  repo, relative = tmp_path / "repo", Path("results/runs/listops/softmax/carried")
  repo.mkdir()
  shutil.copy(Path(__file__).resolve().parents[1] / ".gitignore", repo / ".gitignore")
  save = checkpoints.Checkpointer.save

  def save_then_stop(self, step, *args, **kwargs):  # a SIGTERM arriving just after step 4's save
    save(self, step, *args, **kwargs)
    if step == 4 and not kwargs.get("best"):
      os.kill(os.getpid(), signal.SIGTERM)

  monkeypatch.setattr(checkpoints.Checkpointer, "save", save_then_stop)
  stopped = run.run("listops", "softmax", preset="smoke", data_dir=data_dir,
                    run_dir=repo / relative, progress=False, overrides=overrides)
  monkeypatch.setattr(checkpoints.Checkpointer, "save", save)
  assert stopped["status"] == "interrupted" and 4 <= stopped["step"] < 8
  ckpt_dir = repo / relative / "checkpoints"
  steps = sorted(int(p.name) for p in ckpt_dir.iterdir() if p.name.isdigit())
  assert len(steps) == 2  # keep=2: only the newest is carried

  _git(repo, "init", "-q")
  _git(repo, "add", "-A")
  _git(repo, "add", "-f", str(relative / "checkpoints" / str(steps[-1])),
       str(relative / "checkpoints" / "best"))
  _git(repo, "commit", "-q", "-m", "partial run")
  _git(tmp_path, "clone", "-q", str(repo), "clone")
  carried = tmp_path / "clone" / relative
  assert {p.name for p in (carried / "checkpoints").iterdir()} == {"best", str(steps[-1])}

  capsys.readouterr()
  resumed = run.run("listops", "softmax", preset="smoke", data_dir=data_dir, run_dir=carried,
                    progress=False, overrides=overrides)
  assert "holds no checkpoint" not in capsys.readouterr().err
  assert resumed["status"] == "complete" and resumed["step"] == 8
  for key in ("best_step", "val_accuracy", "test_accuracy", "best_test_accuracy",
              "test_accuracy_last"):
    assert resumed[key] == reference[key], key
  strip = lambda rows: [{k: v for k, v in r.items() if k != "train/steps_per_s"} for r in rows]  # noqa: E731
  assert (strip(read_metrics(carried / "metrics.jsonl"))
          == strip(read_metrics(tmp_path / "clean" / "metrics.jsonl")))


def test_throughput_counts_only_training_steps_and_time():
  """A log window of 50 steps with an evaluation after its 10th: 50 steps over the 50 s of
  training, not 50 steps over the 40 s after the evaluation (what the rate said before)."""
  now = [0.0]
  meter = progress.Throughput(clock=lambda: now[0])
  for i in range(50):
    now[0] += 1.0  # one training step takes 1 s
    meter.step()
    if i == 9:
      with meter.paused():
        now[0] += 300.0  # the evaluation
  assert meter.rate() == pytest.approx(1.0)
  meter.restart()  # a new window: steps before it are not counted again
  now[0] += 4.0
  meter.step()
  assert meter.rate() == pytest.approx(0.25)


def test_a_stop_says_what_it_waits_for_while_the_queued_steps_run(monkeypatch):
  """After Ctrl-C the save waited silently for every step the host had dispatched ahead of the
  device (~100 s at 3 s a step on a CPU): now it says the device's step, how many are queued,
  about how long, and that a second Ctrl-C stops at once; it polls, so that Ctrl-C lands."""
  clock = [0.0]

  class Step:  # one queued step's output: ready once the device reaches it (3 s a step)
    def __init__(self, n):
      self.n = n

    def is_ready(self):
      return clock[0] >= 3.0 * (self.n - 137)

  def sleep(seconds):
    clock[0] += seconds

  monkeypatch.setattr(train.time, "sleep", sleep)
  monkeypatch.setattr(train.time, "monotonic", lambda: clock[0])
  said = []
  bar = type("Bar", (), {"message": lambda self, text: said.append(text)})()
  queued = [(n, Step(n)) for n in range(101, 171)]
  train._wait_for_queued(queued, 170, 0.33, bar, 150)
  assert said[0] == ("the device is at step 137: waiting for the 33 steps already queued up to "
                     "step 170, about 100 s at 0.33 steps/s, then saving; Ctrl-C again stops now "
                     "without saving (the run then resumes from step 150)")
  assert said[1].startswith("still waiting: the device is at step 140 of 170")
  assert 9 <= len(said) <= 11 and clock[0] >= 99  # every 10 s until all 33 have run
  said.clear()
  train._wait_for_queued(queued, 170, 0.33, bar, 150)  # nothing left queued: nothing to say
  assert not said
