"""Self-pretraining (SPT): what is hidden, what the loss reads, what a fine-tune starts from, what
it refuses, and that both phases are runs like any other (exact resume, many devices, own mixers).

Numerical precision: the equality checks here compare parameters and losses computed by the same
program on the same device (bit-exact); the two-device check allows float32 reduction order
(rel 2e-4, as tests/test_scale.py).
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import serialization

from lra.runs.config_loading import load_data, resolve_config
from lra import errors, run
from lra.cli import main
from lra.models.build import build_model
from lra.models.encoder import token_mask
from lra.runs import best_params
from lra.runs.writers import read_metrics
from lra.tasks.contract.batches import example_noise
from lra.tasks.contract.spec import TaskSpec
from lra.training import init_from, objectives, train

ROOT = Path(__file__).resolve().parents[1]
SHORT = ["train.num_steps=8", "eval.every_steps=4", "checkpoint.every_steps=2",
         "train.log_every_steps=1"]
# Long enough that a stop lands mid-run whatever the (real) compile takes on a loaded machine.
RESUMED = ["train.num_steps=24", "eval.every_steps=8", "checkpoint.every_steps=2",
           "train.log_every_steps=1"]


@pytest.fixture(scope="module")
def pretrained(data_dir, tmp_path_factory):
  """A complete smoke pretraining run of Latte on ListOps (8 steps)."""
  run_dir = tmp_path_factory.mktemp("spt") / "pretrain"
  result = run.run("listops", "latte", preset="smoke", overrides=["objective=denoise", *SHORT],
                   data_dir=data_dir, run_dir=run_dir, progress=False)
  assert result["status"] == "complete" and result["objective"] == "denoise"
  return run_dir


def _denoiser_output(config_overrides, spec, batch):
  config = resolve_config("listops", "latte", "smoke", ["objective=denoise",
                                                            *config_overrides])
  model = build_model(config, spec)
  variables = model.init(jax.random.PRNGKey(0), batch, deterministic=True)
  return model.apply(variables, batch, deterministic=True)


def test_hidden_tokens_are_the_ratio_of_real_tokens_and_never_pads():
  spec = TaskSpec(vocab_size=16, seq_len=128, num_classes=10)
  rng = np.random.default_rng(0)
  lengths = rng.integers(1, 129, size=64)
  mask = np.arange(128)[None] < lengths[:, None]
  batch = {"inputs": np.where(mask, rng.integers(1, 16, (64, 128)), 0).astype(np.int32),
           "mask": mask, "weight": np.ones(64, np.float32),
           "noise": example_noise(np.arange(64), 128, seed=7, step=3)}
  for ratio in (0.1, 0.5):
    _, _, hidden, _ = _denoiser_output([f"spt.mask_ratio={ratio}"], spec, batch)
    hidden = np.asarray(hidden)
    assert not np.any(hidden & ~mask)  # pads are never hidden
    real = int(mask.sum())
    share = hidden.sum() / real
    assert abs(share - ratio) < 4 * np.sqrt(ratio * (1 - ratio) / real), (ratio, share)


def test_l1_is_refused_for_a_task_of_tokens():
  spec = TaskSpec(vocab_size=16, seq_len=8, num_classes=10, pad_id=0)
  batch = {"inputs": np.ones((2, 8), np.int32), "mask": np.ones((2, 8), bool),
           "weight": np.ones(2, np.float32), "noise": example_noise(np.arange(2), 8, 0, None)}
  with pytest.raises(errors.BadValue, match="spt.loss=ce"):
    _denoiser_output(["spt.loss=l1"], spec, batch)


def test_the_noise_is_the_examples_own_whatever_the_batch():
  """An example's hidden tokens depend on (seed, step, example) only: not on its batch-mates,
  its row, the padding, or whether it is drawn again at another step."""
  together = example_noise(np.array([5, 9]), 64, seed=1, step=4)
  assert np.array_equal(example_noise(np.array([9]), 64, seed=1, step=4)[0], together[1])
  assert not np.array_equal(example_noise(np.array([9]), 64, seed=1, step=5)[0], together[1])
  # A batch cut to its longest real row hides what the uncut batch hid in those positions.
  assert np.array_equal(example_noise(np.array([9]), 20, seed=1, step=4)[0], together[1, :20])
  # Evaluation (no step) draws the same noise every time.
  assert np.array_equal(example_noise(np.array([9]), 64, 1, None),
                        example_noise(np.array([9]), 64, 1, None))


def test_patches_hide_whole_squares_read_from_their_first_pixel():
  patch, side = 4, 8
  mask = jnp.ones((1, side * side), bool)
  noise = np.ones((1, side * side), np.float32)
  noise[0, 0] = 0.0  # the first pixel of the first 4x4 square
  assert token_mask(mask, patch).shape == (1, 4)
  from lra.models.encoder import token_values  # pylint: disable=import-outside-toplevel
  first = token_values(jnp.asarray(noise), patch)[..., 0]
  assert np.asarray(first < 0.5).tolist() == [[True, False, False, False]]


@pytest.mark.parametrize("loss", ["ce", "l1"])
def test_the_loss_reads_hidden_real_tokens_only(loss):
  rng = np.random.default_rng(1)
  n, t, p = 4, 10, 2
  outputs = 7 if loss == "ce" else 1
  predictions = jnp.asarray(rng.normal(size=(n, t, p, outputs)), jnp.float32)
  values = rng.integers(0, 7, (n, t, p)).astype(np.int32)
  hidden = rng.random((n, t)) < 0.4
  hidden[0, 0], hidden[0, 1] = True, False
  weight = np.ones(n, np.float32)
  weight[3] = 0.0  # a filler row of an eval batch
  hidden[3, :] = True
  base = objectives.denoising_sums((predictions, values, jnp.asarray(hidden), weight), loss)
  assert float(base["count"]) == hidden[:3].sum()

  def changed(row, column):
    other = values.copy()
    other[row, column] = (other[row, column] + 3) % 7
    return objectives.denoising_sums((predictions, other, jnp.asarray(hidden), weight), loss)

  # An unhidden token's value, or any value of a weight-0 row, changes nothing.
  for row, column in ((0, 1), (3, 4)):
    assert all(float(changed(row, column)[k]) == float(base[k]) for k in base)
  # A hidden one changes the loss.
  assert float(changed(0, 0)["loss_sum"]) != float(base["loss_sum"])


def test_lit_pixels_are_scored_alone_as_a_loop_counts_them():
  """The held-out score of lit pixels (objectives.lit_sums): hidden values above level 0 of real
  rows, each predicted exactly or not, against a plain loop over them (exact: counts)."""
  rng = np.random.default_rng(2)
  n, t, p, levels = 3, 6, 4, 5
  predictions = rng.normal(size=(n, t, p, levels)).astype(np.float32)
  values = np.where(rng.random((n, t, p)) < 0.7, 0, rng.integers(1, levels, (n, t, p)))
  hidden = rng.random((n, t)) < 0.5
  weight = np.array([1.0, 1.0, 0.0], np.float32)  # the last row: an eval batch's filler
  sums = objectives.lit_sums((jnp.asarray(predictions), jnp.asarray(values, jnp.int32),
                              jnp.asarray(hidden), jnp.asarray(weight)), "ce")
  lit = right = 0
  for i, j, k in np.ndindex(n, t, p):
    if hidden[i, j] and weight[i] and values[i, j, k] > 0:
      lit += 1
      right += int(np.argmax(predictions[i, j, k]) == values[i, j, k])
  assert lit > 0 and (float(sums["lit_count"]), float(sums["lit_correct_sum"])) == (lit, right)


def test_a_pixel_pretraining_reports_its_lit_pixels(tmp_path):
  """A denoising run on pixels (Pathfinder as 4x4 squares, 40 generated images) evaluates the
  lit pixels alone beside every hidden value: in its metrics, final.json and `lra eval`."""
  overrides = ["objective=denoise", "data.generator.num_images=40", "model.patch=4",
               "model.embedding=dense", "spt.pixel_levels=16", "train.num_steps=2",
               "eval.every_steps=2", "train.log_every_steps=1"]
  result = run.run("pathfinder", "latte", preset="smoke", overrides=overrides, progress=False,
                   data_dir=tmp_path / "data", run_dir=tmp_path / "run")
  assert result["status"] == "complete" and 0.0 <= result["val_lit_accuracy"] <= 1.0
  evals = [m for m in read_metrics(tmp_path / "run" / "metrics.jsonl") if "val/accuracy" in m]
  assert evals and all(0.0 <= m["val/lit_accuracy"] <= 1.0 for m in evals)
  from lra.training import evaluation  # pylint: disable=import-outside-toplevel
  record = evaluation.evaluate_run(tmp_path / "run", split="val", data_dir=tmp_path / "data")
  assert record["objective"] == "denoise"
  assert record["val/lit_accuracy"] == pytest.approx(evals[-1]["val/lit_accuracy"])


def test_a_fine_tune_starts_from_the_pretrained_encoder_and_a_fresh_head(pretrained, data_dir,
                                                                        tmp_path):
  from lra.runs import start  # pylint: disable=import-outside-toplevel
  config = resolve_config("listops", "latte", "smoke", [f"spt.init_from={pretrained}"])
  start.resolve(config, tmp_path)  # as `lra run` does: the start it loads, in its config
  data = load_data(config, data_dir)
  s = train.setup(config, data.spec)
  fresh = train.init_state(s, data.spec, config.train.seed)
  loaded, record = init_from.load(fresh, config, train.data_record(data.meta))
  best = Path(pretrained) / "checkpoints" / "best"
  step = max(int(p.name) for p in best.iterdir())
  saved = serialization.msgpack_restore(best_params.from_orbax(best / str(step)))["params"]
  encoder = {k: v for k, v in saved["encoder"].items() if k != "mask_token"}
  same = jax.tree.map(lambda a, b: bool(np.array_equal(np.asarray(a), np.asarray(b))),
                      dict(loaded.params["encoder"]), encoder)
  assert all(jax.tree.leaves(same))
  for head in set(fresh.params) - {"encoder"}:  # the classifier's own: as a fresh init made it
    assert all(jax.tree.leaves(jax.tree.map(np.array_equal, loaded.params[head],
                                            fresh.params[head])))
  assert record["step"] == step == config.spt.start.step and record["status"] == "complete"
  assert record["config_id"] == config.spt.start.config_id and config.spt.start.complete
  assert len(record["params_sha256"]) == 64


def test_a_mismatched_or_unfinished_pretraining_is_refused_in_one_line(pretrained, data_dir,
                                                                        tmp_path, capsys):
  common = ["run", "listops", "latte", "--preset", "smoke", "--data-dir", str(data_dir),
            "--run-dir", str(tmp_path / "ft"), "--init-from", str(pretrained), "--quiet"]
  assert main([*common, "--config.model.dim=16"]) == 2
  err = capsys.readouterr().err.strip()
  assert err.count("\n") == 0 and "model.dim is 32 there and 16 here" in err, err
  # The seed pairs a fine-tune with its pretraining; the denoising settings are the pretraining's.
  for words, says in ((["--seed", "1"], "pass --seed 0"),
                      (["--config.spt.mask_ratio=0.3"], "and 0.3 here")):
    assert main([*common, *words]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and says in err, err
  tune = [word if word != "latte" else "softmax" for word in common]
  assert main(tune) == 2
  assert "it pretrained mixer latte" in capsys.readouterr().err
  final = pretrained / "final.json"
  record = json.loads(final.read_text())
  final.write_text(json.dumps({**record, "status": "interrupted", "step": 4}))
  try:
    assert main(common) == 2
    assert "--allow-partial" in capsys.readouterr().err
  finally:
    final.write_text(json.dumps(record))
  assert not (tmp_path / "ft").exists()  # refused before anything was written


@pytest.mark.parametrize("phase", ["pretrain", "spt"])
def test_each_phase_resumes_exactly_after_a_stop(phase, pretrained, data_dir, tmp_path,
                                                 step_clock, monkeypatch):
  overrides = (["objective=denoise"] if phase == "pretrain"
               else [f"spt.init_from={pretrained}"]) + RESUMED
  whole = run.run("listops", "latte", preset="smoke", overrides=overrides, data_dir=data_dir,
                  run_dir=tmp_path / "whole", progress=False)
  step_clock()
  stopped = run.run("listops", "latte", preset="smoke", overrides=overrides, data_dir=data_dir,
                    run_dir=tmp_path / "parts", progress=False, stop_after_s=40.0)
  monkeypatch.undo()
  assert stopped["status"] == "interrupted" and 0 < stopped["step"] < 24, stopped
  loads = []
  monkeypatch.setattr(init_from, "load", lambda *a, **k: loads.append(1) or None)
  resumed = run.run("listops", "latte", preset="smoke", overrides=overrides, data_dir=data_dir,
                    run_dir=tmp_path / "parts", progress=False)
  assert not loads  # a resumed fine-tune continues its own state, never the pretrained one
  rows = [[{k: v for k, v in r.items() if k != "train/steps_per_s"}
           for r in read_metrics(d / "metrics.jsonl")] for d in (tmp_path / "whole",
                                                                tmp_path / "parts")]
  assert rows[0] == rows[1]
  for key in ("status", "best_step", "val_accuracy", "val_loss", "test_accuracy", "pretrained"):
    assert resumed.get(key) == whole.get(key), key


def test_two_devices_pretrain_as_one(pretrained, data_dir, tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS="--xla_force_host_platform_device_count=2 "
                       "--xla_cpu_multi_thread_eigen=false")
  proc = subprocess.run(
      [sys.executable, "-m", "lra", "pretrain", "listops", "latte", "--preset", "smoke", "--quiet",
       "--data-dir", str(data_dir), "--run-dir", str(tmp_path / "two"),
       *(f"--config.{o}" for o in SHORT)], cwd=ROOT, env=env, capture_output=True, text=True,
      timeout=600, check=False)
  assert proc.returncode == 0, proc.stderr
  assert json.loads((tmp_path / "two" / "final.json").read_text())["num_devices"] == 2
  one, two = (read_metrics(d / "metrics.jsonl") for d in (pretrained, tmp_path / "two"))
  assert [sorted(r) for r in one] == [sorted(r) for r in two]
  for a, b in zip(one, two):
    for key in a:
      if key != "train/steps_per_s":
        assert b[key] == pytest.approx(a[key], rel=2e-4, abs=1e-5), (key, a["step"])


def test_own_mixer_file_pretrains_and_fine_tunes(data_dir, tmp_path, monkeypatch):
  from test_own_mixer import MEAN_GATE  # pylint: disable=import-outside-toplevel
  layer = tmp_path / "my_layers" / "mean_gate.py"
  layer.parent.mkdir()
  layer.write_text(MEAN_GATE)
  monkeypatch.chdir(tmp_path)
  spec = "my_layers/mean_gate.py:MeanGate"
  common = ["listops", spec, "--preset", "smoke", "--data-dir", str(data_dir), "--quiet",
            "--results-dir", str(tmp_path / "results")]
  assert main(["pretrain", *common]) == 0
  runs = tmp_path / "results" / "runs" / "listops"
  [pre] = list(runs.glob("MeanGate@*/smoke+pretrain_seed0"))
  assert main(["run", *common, "--init-from", str(pre)]) == 0
  final = json.loads((pre.parent / "smoke+spt_seed0" / "final.json").read_text())
  assert final["status"] == "complete" and final["pretrained"]["step"] > 0


def test_rope_scores_depend_on_the_offset_only_and_pads_change_nothing(highest_precision):
  from lra.models.mixers.rope import rotate_queries_and_keys  # pylint: disable=import-outside-toplevel
  from lra.models.mixers.softmax import SoftmaxMixer  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  q = jnp.broadcast_to(jnp.asarray(rng.normal(size=(1, 1, 2, 8)), jnp.float32), (1, 12, 2, 8))
  k = jnp.broadcast_to(jnp.asarray(rng.normal(size=(1, 1, 2, 8)), jnp.float32), (1, 12, 2, 8))
  rq, rk = rotate_queries_and_keys(q, k, "softmax")
  scores = np.asarray(jnp.einsum("bthd,bshd->bhts", rq, rk))[0, 0]
  for offset in range(-3, 4):  # the same offset, the same score, wherever the pair sits
    diagonal = np.diagonal(scores, offset)
    np.testing.assert_allclose(diagonal, diagonal[0], rtol=1e-5, atol=1e-5)
  assert not np.allclose(np.diagonal(scores, 0)[0], np.diagonal(scores, 2)[0])
  # Pads: a sequence padded further gives its real tokens the same outputs.
  mixer = SoftmaxMixer(dim=16, num_heads=2, max_len=12, rope=True)
  x = jnp.asarray(rng.normal(size=(1, 12, 16)), jnp.float32)
  short = jnp.arange(12)[None] < 7
  params = mixer.init(jax.random.PRNGKey(0), x, short, deterministic=True)
  y, _ = mixer.apply(params, x, short, deterministic=True)
  y_cut, _ = mixer.apply(params, x[:, :9], short[:, :9], deterministic=True)
  np.testing.assert_allclose(np.asarray(y[:, :7]), np.asarray(y_cut[:, :7]), rtol=1e-5,
                             atol=1e-6)


def pretrain_and_fine_tune(task: str, data_dir, root) -> dict:
  """`lra pretrain TASK softmax --preset smoke`, then its fine-tune, on prepared data: what the
  readers' tests run on their fixtures (Text, Retrieval's pairs, Image's L1 pixels)."""
  pre, tune = root / "pretrain", root / "fine-tune"
  common = ["--preset", "smoke", "--data-dir", str(data_dir), "--quiet"]
  assert main(["pretrain", task, "softmax", *common, "--run-dir", str(pre)]) == 0
  assert json.loads((pre / "final.json").read_text())["objective"] == "denoise"
  assert main(["run", task, "softmax", *common, "--run-dir", str(tune), "--init-from",
               str(pre)]) == 0
  final = json.loads((tune / "final.json").read_text())
  assert final["status"] == "complete" and final["pretrained"]["step"] >= 1
  # Its config.json records the start it loaded, which its name and key read.
  recorded = json.loads((tune / "config.json").read_text())["spt"]["start"]
  assert recorded["complete"] and recorded["step"] == final["pretrained"]["step"]
  assert recorded["config_id"] == final["pretrained"]["config_id"]
  return final


def test_a_fine_tune_resumes_only_from_the_pretraining_it_loaded(pretrained, data_dir, tmp_path,
                                                                capsys):
  """A folder holding a fine-tune from another pretraining (its recorded start; for a config from
  before the record, final.json's) is another run: `lra run --run-dir` into it is refused in one
  line, before anything trains."""
  from lra.runs import run_identity, start  # pylint: disable=import-outside-toplevel
  from lra.runs.config_loading import reference_config  # pylint: disable=import-outside-toplevel
  config = resolve_config("listops", "latte", "smoke", [f"spt.init_from={pretrained}"])
  start.resolve(config, tmp_path)
  ours, reference = config.to_dict(), reference_config(config.to_dict()).to_dict()
  other = json.loads(json.dumps(ours))
  other["spt"]["start"]["config_id"] = "0" * 8
  assert run_identity.same_run(other, ours, reference) == [
      f"it started from pretraining 00000000, this command from pretraining "
      f"{ours['spt']['start']['config_id']}"]
  # Written before the record: the key its final.json recorded, the folder named there gone.
  legacy = json.loads(json.dumps(ours))
  del legacy["spt"]["start"]
  tune = tmp_path / "tune"
  tune.mkdir()
  (tune / "config.json").write_text(json.dumps(legacy))
  for loaded, refused in ((ours["spt"]["start"]["config_id"], False), ("0" * 8, True)):
    (tune / "final.json").write_text(json.dumps({"pretrained": {"config_id": loaded,
                                                                "run_dir": "elsewhere"}}))
    stored, _ = start.read_run(tune)
    assert bool(run_identity.same_run(stored, ours, reference)) == refused
  assert main(["run", "listops", "latte", "--preset", "smoke", "--data-dir", str(data_dir),
               "--run-dir", str(tune), "--init-from", str(pretrained), "--quiet"]) == 2
  err = capsys.readouterr().err.strip()
  assert err.count("\n") == 0 and "it started from pretraining 00000000" in err, err
  assert not (tune / "metrics.jsonl").exists()


def test_predictions_of_a_pretraining_run_are_refused_in_one_line(pretrained, tmp_path, capsys):
  assert main(["eval", str(pretrained), "--predictions", str(tmp_path / "p.npy")]) == 2
  err = capsys.readouterr().err.strip()
  assert err.count("\n") == 0 and "self-pretraining run" in err, err
  assert not (tmp_path / "p.npy").exists()


def test_eval_of_a_pretraining_reads_val_and_its_hint_names_lra_pretrain(pretrained, data_dir,
                                                                          tmp_path, capsys):
  """Denoising never reads test (its best checkpoint is chosen on val): `lra eval` of a
  pretraining scores val unless test is asked for, and a folder without checkpoints is told to
  rerun the command that made it, `lra pretrain`."""
  assert main(["eval", str(pretrained), "--data-dir", str(data_dir)]) == 0
  assert " on val: accuracy " in capsys.readouterr().out
  assert main(["eval", str(pretrained), "--data-dir", str(data_dir), "--split", "test"]) == 0
  assert " on test: accuracy " in capsys.readouterr().out  # asked for: its choice
  bare = tmp_path / "bare"
  bare.mkdir()
  for name in ("config.json", "final.json"):
    shutil.copy(pretrained / name, bare / name)
  assert main(["eval", str(bare), "--data-dir", str(data_dir)]) == 2
  err = capsys.readouterr().err
  assert "rerun `lra pretrain listops latte --preset smoke --run-dir" in err, err


def test_a_pretraining_run_gets_no_synthetic_verdict():
  from lra.report import run_summary  # pylint: disable=import-outside-toplevel
  result = {"task": "synthetic", "status": "complete", "preset": "smoke", "test_accuracy": 0.1}
  assert run_summary.synthetic_verdict(result) is not None  # a classifier's smoke run: the line
  assert run_summary.synthetic_verdict({**result, "objective": "denoise"}) is None


def test_a_fine_tune_is_named_for_how_its_pretraining_departs(pretrained, tmp_path):
  """A fine-tune from a pretraining that departs from its preset (here: 8 steps, evaluated every
  4) gets another folder than one from the preset's own pretraining: the two never resume into
  each other. The name is the same whether the start is read from the pretraining's folder or,
  before that exists, from its config (lra sweep --spt, the dry run)."""
  from lra.runs import run_identity, start  # pylint: disable=import-outside-toplevel
  from lra.runs.config_loading import default_run_dir, reference_config  # pylint: disable=C0415
  tune = resolve_config("listops", "latte", "smoke", [f"spt.init_from={pretrained}"])
  start.resolve(tune, tmp_path)
  named = default_run_dir(tune, tmp_path).name
  reference = reference_config(tune.to_dict()).to_dict()
  items = run_identity.start_items(tune.to_dict(), reference)
  assert "pretrain.train.num_steps=8" in items and "pretrain.eval.every_steps=4" in items
  plain = resolve_config("listops", "latte", "smoke", [f"spt.init_from={tmp_path / 'absent'}"])
  assert start.resolve(plain, tmp_path) is None and not plain.spt.start.config_id
  assert default_run_dir(plain, tmp_path).name == "smoke+spt_seed0" != named
  assert named.startswith("smoke+spt,") and named.endswith("_seed0")
  planned = resolve_config("listops", "latte", "smoke", [f"spt.init_from={pretrained}"])
  config = resolve_config("listops", "latte", "smoke", ["objective=denoise", *SHORT])
  start.write(planned, start.of_pretraining(config.to_dict()))
  assert default_run_dir(planned, tmp_path).name == named
  # What the fine-tune sets itself is its own departure, not its start's.
  both = resolve_config("listops", "latte", "smoke", [f"spt.init_from={pretrained}",
                                                      "eval.every_steps=4"])
  start.resolve(both, tmp_path)
  assert "pretrain.eval.every_steps=4" not in run_identity.start_items(both.to_dict(), reference)


def test_a_fine_tunes_folder_is_what_it_trained_not_what_is_on_disk(pretrained, tmp_path):
  """Its config records its start, so a fine-tune keeps its folder and key once its pretraining's
  folder is gone; and the same command then finds it (its own folder's record), rather than the
  folder of a fine-tune from the preset's own pretraining."""
  import ml_collections  # pylint: disable=import-outside-toplevel

  from lra.runs import start  # pylint: disable=import-outside-toplevel
  from lra.runs.config_loading import default_run_dir, run_key  # pylint: disable=C0415
  moved = tmp_path / "pretrain"
  shutil.copytree(pretrained, moved)
  results = tmp_path / "results"
  tune = resolve_config("listops", "latte", "smoke", [f"spt.init_from={moved}"])
  start.resolve(tune, results)
  folder = default_run_dir(tune, results)
  key = run_key(tune.to_dict())
  folder.mkdir(parents=True)
  (folder / "config.json").write_text(json.dumps(tune.to_dict()))  # as `lra run` writes it
  (folder / "final.json").write_text(json.dumps({"status": "complete"}))
  shutil.rmtree(moved)
  stored, final = start.read_run(folder)
  assert default_run_dir(ml_collections.ConfigDict(stored), results) == folder
  assert run_key(stored) == key
  again = resolve_config("listops", "latte", "smoke", [f"spt.init_from={moved}"])
  assert start.resolve(again, results) == folder and run_key(again.to_dict()) == key


def test_a_typed_fine_tune_finds_its_folder_once_its_pretraining_is_gone(pretrained, tmp_path,
                                                                        capsys):
  """`lra run ... --init-from PRE` after PRE's folder was deleted: the fine-tune made from it
  (here one written before the start record: its final.json names PRE's key) is that command's
  folder, not the folder of a fine-tune from the preset's own pretraining."""
  moved, results = tmp_path / "pretrain", tmp_path / "results"
  shutil.copytree(pretrained, moved)
  config = resolve_config("listops", "latte", "smoke", [f"spt.init_from={moved}"]).to_dict()
  config["spt"].pop("start", None)  # as every fine-tune committed before the record
  pre = json.loads((moved / "config.json").read_text())
  from lra.runs.config_loading import preset_reference  # pylint: disable=C0415
  from lra.runs.run_identity import config_fingerprint  # pylint: disable=C0415
  folder = results / "runs" / "listops" / "latte" / "smoke+spt,pretrain.train.num_steps=8_seed0"
  folder.mkdir(parents=True)
  (folder / "config.json").write_text(json.dumps(config))
  (folder / "final.json").write_text(json.dumps({"status": "complete", "step": 20, "pretrained": {
      "config_id": config_fingerprint(pre, preset_reference(pre)), "run_dir": str(moved),
      "step": 8, "status": "complete"}}))
  shutil.rmtree(moved)
  assert main(["run", "listops", "latte", "--preset", "smoke", "--init-from", str(moved),
               "--results-dir", str(results), "--dry-run"]) == 0
  out = capsys.readouterr().out
  assert f"run folder: {folder} (exists, complete at step 20" in out, out[:600]


def test_a_partial_start_is_its_own_experiment(pretrained, tmp_path, capsys):
  """A fine-tune from an unfinished pretraining says so in its name and key (the step it loaded),
  never averaged with fine-tunes from the finished one; once the pretraining finishes, the same
  command makes the complete-start fine-tune."""
  copy = tmp_path / "pretrain"
  shutil.copytree(pretrained, copy)
  final = json.loads((copy / "final.json").read_text())
  (copy / "final.json").write_text(json.dumps({**final, "status": "interrupted"}))
  command = ["run", "listops", "latte", "--preset", "smoke", "--init-from", str(copy),
             "--allow-partial", "--results-dir", str(tmp_path / "results"), "--dry-run"]

  def folder() -> str:
    assert main(command) == 0
    line = next(line for line in capsys.readouterr().out.splitlines()
                if line.startswith("run folder: "))
    return Path(line.removeprefix("run folder: ").split(" (")[0]).name
  best = max(int(p.name) for p in (copy / "checkpoints" / "best").iterdir())
  partial = folder()
  assert partial.endswith(f",pretrain.partial={best}_seed0"), partial
  (copy / "final.json").write_text(json.dumps(final))  # the pretraining finished since
  complete = folder()
  assert "partial" not in complete and complete != partial
  from lra.runs import start  # pylint: disable=import-outside-toplevel
  from lra.runs.config_loading import run_key  # pylint: disable=import-outside-toplevel
  keys = []
  for status in ("interrupted", "complete"):
    (copy / "final.json").write_text(json.dumps({**final, "status": status}))
    config = resolve_config("listops", "latte", "smoke", [f"spt.init_from={copy}"])
    start.resolve(config, tmp_path)
    keys.append(run_key(config.to_dict()))
  assert keys[0] != keys[1]  # two rows of the tables, never one mean


def test_the_fine_tune_command_a_pretraining_prints_takes_the_presets_budget(pretrained):
  """A pretraining run's summary ends with the command that fine-tunes from it: its encoder's
  settings and seed, but not its own length (train.num_steps=8 here, a phase's budget), which
  would make the fine-tune as long as the pretraining."""
  import shlex  # pylint: disable=import-outside-toplevel

  from lra.runs import pack, run_identity  # pylint: disable=import-outside-toplevel
  from lra.runs.command import run_config  # pylint: disable=import-outside-toplevel
  stored = run_identity.read_config(pretrained / "config.json")
  assert stored["train"]["num_steps"] == 8
  command = pack.fine_tune_command(stored, pretrained)
  assert "--config.eval.every_steps=4" in command and "train.num_steps" not in command
  tune = run_config(shlex.split(command)[1:])
  plain = resolve_config("listops", "latte", "smoke", [f"spt.init_from={pretrained}"])
  assert tune.train.num_steps == plain.train.num_steps != 8
