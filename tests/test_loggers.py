"""TensorBoard event files and W&B runs hold what metrics.jsonl holds: the same scalars at the same
steps, after a resume too; a missing extra is one line with its install command."""
import json
import sys
import time
import types

import pytest

from lra import cli, run
from lra.runs import loggers
from lra.runs.config_loading import default_run_dir, resolve_config
from lra.runs.writers import MetricsWriter, read_metrics


def _scalars_of(path):
  """{tag: [(step, value)]} as TensorBoard's own reader gives them."""
  from tensorboard.backend.event_processing import event_accumulator
  reader = event_accumulator.EventAccumulator(str(path),
                                              size_guidance={event_accumulator.SCALARS: 0})
  reader.Reload()
  return {tag: [(e.step, e.value) for e in reader.Scalars(tag)]
          for tag in reader.Tags()["scalars"]}


def _curves_of(run_dir):
  """{key: [(step, value)]} from metrics.jsonl."""
  curves = {}
  for row in read_metrics(run_dir / "metrics.jsonl"):
    for key, value in row.items():
      if key != "step":
        curves.setdefault(key, []).append((row["step"], value))
  return curves


def _assert_same(scalars, curves):
  assert scalars.keys() == curves.keys()
  for key, points in curves.items():
    assert [s for s, _ in scalars[key]] == [s for s, _ in points], key
    assert [v for _, v in scalars[key]] == pytest.approx([v for _, v in points], rel=1e-6), key


def _write(writer, steps, offset=0.0):
  for step in steps:
    writer.write(step, {"train/loss": 1.0 / step + offset, "train/accuracy": 0.1 + offset})
    if step % 20 == 0:
      writer.write(step, {"val/accuracy": step / 100 + offset, "val/num_examples": 64})


def test_tensorboard_event_files_hold_the_curve_and_a_resume_drops_what_follows_its_checkpoint(
    tmp_path):
  pytest.importorskip("tensorboard")
  with_tb = lambda resume: MetricsWriter(  # noqa: E731
      tmp_path / "metrics.jsonl", resume, loggers=[loggers.TensorBoard(tmp_path, resume)])
  first = with_tb(None)
  _write(first, [10, 20, 30, 40])
  first.close()
  # Killed after step 40, resumed from the checkpoint at step 20. A resumed run recomputes the
  # same values; different ones here show which of the two attempts each point comes from.
  time.sleep(1.05)  # event files sort by the second they were made in, as real attempts do
  resumed = with_tb(20)
  _write(resumed, [30, 40, 50, 60], offset=1.0)
  resumed.close()
  assert len(list(tmp_path.glob(loggers.EVENT_FILES))) == 2  # a resume writes a new file
  curves = _curves_of(tmp_path)
  assert [s for s, _ in curves["train/loss"]] == [10, 20, 30, 40, 50, 60]
  _assert_same(_scalars_of(tmp_path), curves)

  fresh = with_tb(None)  # starting over replaces the curve, event files included
  _write(fresh, [10])
  fresh.close()
  assert len(list(tmp_path.glob(loggers.EVENT_FILES))) == 1
  _assert_same(_scalars_of(tmp_path), _curves_of(tmp_path))


class FakeRun:
  def __init__(self, kwargs):
    self.kwargs, self.logged, self.finished = kwargs, [], False

  def log(self, data, step):
    self.logged.append((step, dict(data)))

  def finish(self):
    self.finished = True


@pytest.fixture
def fake_wandb(monkeypatch):
  """A stand-in for the wandb package that records what it is given."""
  module = types.ModuleType("wandb")
  module.runs = []

  def init(**kwargs):
    module.runs.append(FakeRun(kwargs))
    return module.runs[-1]
  module.init = init
  monkeypatch.setitem(sys.modules, "wandb", module)
  return module


def test_wandb_resumes_its_run_and_sends_each_step_once(tmp_path, fake_wandb):
  def with_wandb(resume):
    return MetricsWriter(tmp_path / "metrics.jsonl", resume, loggers=[loggers.WandB(
        "lra", tmp_path, resume, name="listops/latte/demo_seed0", config={"task": "listops"})])
  first = with_wandb(None)
  _write(first, [10, 20, 30, 40])
  first.close()
  resumed = with_wandb(20)  # W&B already holds steps 30 and 40 (equal values: exact resume)
  _write(resumed, [30, 40, 50, 60])
  resumed.close()
  one, two = fake_wandb.runs
  assert one.kwargs["id"] == two.kwargs["id"] == json.loads(
      (tmp_path / loggers.WANDB_STATE).read_text())["id"]
  assert two.kwargs["resume"] == "allow" and two.kwargs["dir"] == str(tmp_path)
  assert one.finished and two.finished
  sent = {}
  for step, data in one.logged + two.logged:
    sent.setdefault(step, {}).update(data)
  for step, row in sent.items():
    assert {k: v for k, v in row.items()} == {k: float(v) for r in read_metrics(
        tmp_path / "metrics.jsonl") if r["step"] == step for k, v in r.items() if k != "step"}
  assert [s for s, _ in two.logged] == [50, 60, 60]  # train and eval records of step 60
  with_wandb(None).close()  # starting over: a new W&B run
  assert fake_wandb.runs[-1].kwargs["id"] != one.kwargs["id"]


def test_wandb_offline_resumes_the_same_run(tmp_path, monkeypatch):
  pytest.importorskip("wandb")  # the wandb extra: not in dev (heavy), so CI skips this
  monkeypatch.setenv("WANDB_MODE", "offline")
  monkeypatch.setenv("WANDB_SILENT", "true")
  monkeypatch.setenv("WANDB_CONSOLE", "off")
  for resume, steps in ((None, [10, 20]), (20, [30, 40])):
    writer = MetricsWriter(tmp_path / "metrics.jsonl", resume, loggers=[loggers.WandB(
        "lra-test", tmp_path, resume, name="t", config={})])
    _write(writer, steps)
    writer.close()
  run_id = json.loads((tmp_path / loggers.WANDB_STATE).read_text())["id"]
  offline = sorted(p.name for p in (tmp_path / "wandb").glob("offline-run-*"))
  assert len(offline) == 2 and all(name.endswith(run_id) for name in offline)


def test_a_run_logs_the_same_scalars_everywhere_under_the_same_name(tmp_path, fake_wandb):
  pytest.importorskip("tensorboard")
  overrides = ["train.num_steps=4", "eval.every_steps=2", "train.log_every_steps=1"]
  logging = ["log.tensorboard=True", "log.wandb=lra"]
  result = run.run("listops", "softmax", preset="smoke", data_dir=tmp_path / "data",
                   results_dir=tmp_path, progress=False, overrides=overrides + logging)
  run_dir = default_run_dir(resolve_config("listops", "softmax", "smoke", overrides), tmp_path)
  assert result["status"] == "complete" and (run_dir / "final.json").exists()  # same folder
  curves = _curves_of(run_dir)
  assert {"train/loss", "val/accuracy", "test/accuracy"} <= curves.keys()
  _assert_same(_scalars_of(run_dir), curves)
  (wandb_run,) = fake_wandb.runs
  assert wandb_run.finished and wandb_run.kwargs["name"] == f"listops/softmax/{run_dir.name}"
  sent = {}
  for step, data in wandb_run.logged:
    for key, value in data.items():
      sent.setdefault(key, []).append((step, value))
  assert sent == {k: [(s, float(v)) for s, v in points] for k, points in curves.items()}


def test_a_missing_extra_is_one_line_before_any_work(tmp_path, monkeypatch, capsys):
  monkeypatch.setitem(sys.modules, "tensorboard.summary.writer.event_file_writer", None)
  code = cli.main(["run", "listops", "softmax", "--preset", "smoke", "--data-dir",
                   str(tmp_path / "data"), "--run-dir", str(tmp_path / "run"),
                   "--config.log.tensorboard=True"])
  err = capsys.readouterr().err
  assert code == 2 and err.count("\n") == 1
  assert ('needs the tensorboard package: pip install -c requirements-lock.txt -e '
          '".[tensorboard]"') in err
  assert not (tmp_path / "data").exists() and not (tmp_path / "run").exists()
