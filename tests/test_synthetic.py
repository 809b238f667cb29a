"""The synthetic both-ends task: its generator, its cache via the runner, and (slow) that every
registered mixer learns it."""
import json
from pathlib import Path

import numpy as np
import pytest

from lra.runs.config_loading import load_data, resolve_config
from lra import run
from lra.report import run_summary
from lra.models.mixers import MIXERS
from lra.tasks.generators import synthetic

ROOT = Path(__file__).resolve().parents[1]


def test_generator_puts_the_label_at_both_ends_of_variable_lengths():
  rng = np.random.default_rng(0)
  inputs, labels = synthetic.generate_split(500, seq_len=40, min_length=3, num_values=3,
                                            num_fillers=5, rng=rng)
  assert inputs.shape == (500, 40) and labels.shape == (500,)
  lengths = np.count_nonzero(inputs, axis=1)
  assert lengths.min() >= 3 and lengths.max() <= 40 and len(set(lengths)) > 20
  for row, label, n in zip(inputs, labels, lengths):
    assert (row[:n] != 0).all() and (row[n:] == 0).all()       # right padding only
    start, end = row[0] - 1, row[n - 1] - 1 - 3
    assert 0 <= start < 3 and 0 <= end < 3
    assert label == start * 3 + end
    assert ((row[1:n - 1] >= 7) & (row[1:n - 1] < 12)).all()  # only fillers in between
  assert len(set(labels.tolist())) == 9
  again, _ = synthetic.generate_split(500, seq_len=40, min_length=3, num_values=3,
                                      num_fillers=5, rng=np.random.default_rng(0))
  np.testing.assert_array_equal(inputs, again)


def test_runner_generates_the_cache_from_the_config(tmp_path):
  config = resolve_config("synthetic", "latte", "smoke")
  data = load_data(config, tmp_path, log=lambda msg: None)
  gen = config.data.generator
  assert data.spec.seq_len == gen.seq_len and data.spec.num_classes == gen.num_values ** 2
  assert data.spec.vocab_size == 1 + 2 * gen.num_values + gen.num_fillers
  assert {s: data.num_examples(s) for s in ("train", "val", "test")} == {
      "train": gen.num_train, "val": gen.num_val, "test": gen.num_test}
  test = data.split("test")
  assert not np.array_equal(np.asarray(test["inputs"]), np.asarray(data.split("val")["inputs"]))
  # Re-preparing with the same recipe keeps the cache; another recipe rebuilds it.
  raw_dir = data.cache_dir.with_name(data.cache_dir.name + "_raw")
  assert synthetic.prepare(raw_dir, data.cache_dir) == data.meta
  meta = synthetic.prepare(tmp_path / "nowhere", tmp_path / "other", seq_len=48, num_train=10)
  assert meta["seq_len"] == 48 and meta["splits"]["train"] == 10
  assert json.loads((tmp_path / "other" / "meta.json").read_text()) == meta
  with pytest.raises(ValueError, match="unknown settings"):
    synthetic.prepare(tmp_path / "nowhere", tmp_path / "bad", seq_lenght=3)


def test_the_summary_of_a_synthetic_run_says_whether_the_mixer_mixes():
  """The committed paper runs (100% for the mixers that mix; Linformer, Mega-Chunk and Reformer's
  same-bucket rule at 24-58%) get the verdicts their accuracies call for; a smoke run, another
  task and an unfinished run get none."""
  runs = sorted((ROOT / "results" / "runs" / "synthetic").glob("*/*/final.json"))
  verdicts = {}
  for path in runs:
    final = json.loads(path.read_text())
    verdicts[path.parent.relative_to(path.parents[2]).as_posix()] = next(
        line.strip() for line in run_summary.result_lines(final) if "verdict:" in line)
  assert verdicts["latte/paper_seed0"] == ("verdict: mixes: 100.00% test at the best val step, "
                                           "at or above the pass mark of 95% (the built-in "
                                           "mixers that mix reach 98.5-100%)")
  assert verdicts["mega/paper_seed0"] == (
      "verdict: does not mix in 1,500 steps: 58.10% test at the best val step, under the pass "
      "mark of 95% (one end alone gives 25.00%, chance 6.25%; the built-in mixers that mix reach "
      "98.5-100%)")
  failing = {k for k, v in verdicts.items() if v.startswith("verdict: does not mix")}
  assert failing == {"linformer/paper_seed0", "mega/paper_seed0", "reformer/paper_seed0",
                     "local/paper_seed0"}  # local attention's blocks of 50 never reach the end
  assert len(verdicts) - len(failing) >= 12  # every other committed run mixes
  passing = [json.loads(p.read_text())["test_accuracy"] for p in runs
             if p.parent.name == "paper_seed0" and not verdicts[
                 p.parent.relative_to(p.parents[2]).as_posix()].startswith("verdict: does not")]
  low, high = (f"{100 * v:g}" for v in (min(passing), max(passing)))
  assert run_summary.BUILT_IN_MIXING == f"{low}-{high}%"  # what the verdict line quotes

  final = json.loads(runs[0].read_text())
  assert "verdict: none from the smoke preset" in run_summary.result_lines(
      {**final, "preset": "smoke"})[-1]
  for other in ({**final, "task": "listops"}, {**final, "status": "interrupted"}):
    assert not any("verdict" in line for line in run_summary.result_lines(other))


def test_decode_shows_the_two_ends():
  assert synthetic.decode(np.array([2, 9, 10, 6, 0, 0])) == "2 . . 6"


# Linformer's fixed length projections (one column of E per position) weigh the last real token
# by a factor that depends on where the sequence ends; it stays near 25% (one end only). Strict:
# if a change makes it pass, this marker must go.
# Mega-Chunk attends within chunks of 128: a last token outside CLS's chunk reaches it only through
# the EMA, whose decays start near 0.75 a step (Mega's init), so no gradient crosses 128 steps
# (0.75^128 ~ 1e-16). Measured (2026-11-26): 100% test where the last token lies in CLS's chunk,
# 26% on the last value (chance 25%) elsewhere; 58% in all.
# Reformer with the paper's rule (keys from the query's own hash bucket only, the default since
# 2026-11-27): 24.0% test at the best val step (28.3% best), one end; across buckets, 100%.
# Local Attention by design: CLS and the last token share a block of 50 only in sequences under
# 50 tokens (lengths are 32-256), and no layer crosses blocks (expected ~30%: one end alone gives
# 25%; not measured yet).
KNOWN_FAILURES = {"linformer": "fixed length projections cannot follow a variable last position",
                  "mega": "beyond CLS's chunk only the EMA, which starts with a ~4-token memory",
                  "reformer": "CLS reaches the last token only if hashing puts both in one bucket",
                  "local": "blocks of 50: CLS sees the last token only in sequences under 50"}


@pytest.mark.slow
@pytest.mark.parametrize("mixer", [
    pytest.param(m, marks=pytest.mark.xfail(reason=KNOWN_FAILURES[m], strict=True))
    if m in KNOWN_FAILURES else m for m in sorted(MIXERS)])
def test_every_mixer_learns_both_ends(mixer, tmp_path):
  """The pass mark (run_summary.MIXES_AT, 95%) with the default (small, CPU) synthetic config."""
  result = run.run("synthetic", mixer, preset="paper", data_dir=tmp_path / "data",
                   run_dir=tmp_path / "run", progress=False)
  assert result["status"] == "complete"
  assert result["test_accuracy"] >= run_summary.MIXES_AT, result
