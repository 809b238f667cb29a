"""`lra run --stop-after`, `lra pack` and `lra unpack`: a run stopped by its deadline, packed in
parts, unpacked into a fresh results folder (another clone) and resumed ends as an uninterrupted
run, bit for bit; a finished run's archive lets `lra eval` reproduce its score."""
import io
import json
import shlex
import subprocess
import tarfile
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from lra import run
from lra.report.table_rules import decimals
from lra.runs import pack
from lra.cli import main
from lra.runs.writers import read_metrics

ROOT = Path(__file__).resolve().parents[1]
# Dropout on, from the rbg generator: a resumed run must draw the masks the uninterrupted one did.
OVERRIDES = ["model.dropout=0.1", "train.dropout_bits=unsafe_rbg", "train.num_steps=20",
             "eval.every_steps=2", "train.log_every_steps=1", "checkpoint.every_steps=2"]
SCORES = ("status", "step", "best_step", "val_accuracy", "test_accuracy", "best_test_accuracy",
          "best_test_step", "test_accuracy_last")


def _args(results, *extra):
  return ["run", "listops", "latte", "--preset", "smoke", "--quiet", "--data-dir", str(results[1]),
          "--results-dir", str(results[0]), *extra, *(f"--config.{o}" for o in OVERRIDES)]


def _state(run_dir: Path, step: int) -> dict:
  with ocp.PyTreeCheckpointer() as reader:
    return reader.restore((run_dir / "checkpoints" / str(step) / "state").resolve())


def _curve(run_dir: Path) -> list[dict]:
  return [{k: v for k, v in r.items() if k != "train/steps_per_s"}
          for r in read_metrics(run_dir / "metrics.jsonl")]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  root = tmp_path_factory.mktemp("reference")
  result = run.run("listops", "latte", preset="smoke", overrides=OVERRIDES, data_dir=root / "data",
                   results_dir=root / "results", progress=False)
  assert result["status"] == "complete"
  run_dir, = (root / "results" / "runs" / "listops" / "latte").iterdir()
  return run_dir, result, root / "data"


def test_stopped_packed_unpacked_resumed_equals_uninterrupted(reference, tmp_path, step_clock,
                                                               monkeypatch, capsys):
  clean, expected, data = reference
  place = clean.relative_to(clean.parents[3])  # runs/listops/latte/<name>
  # A step-based clock, so the stop falls on the same step on any machine: a step takes 1 s,
  # an evaluation of a split 3 s, a save 2 s (step 7 of 20 today, after 3 evaluations).
  step_clock()
  first = (tmp_path / "a" / "results", data)
  assert main(_args(first, "--stop-after", "50")) == 130
  stopped_dir = first[0] / place
  stopped = json.loads((stopped_dir / "final.json").read_text())
  assert stopped["status"] == "interrupted" and stopped["stop_reason"] == "--stop-after 50 s"
  assert 4 <= stopped["step"] < 20 and stopped["best_step"] > 0
  monkeypatch.undo()
  out = capsys.readouterr().out
  assert "saved: `lra run " in out and "` resumes it from this step" in out

  # Small parts, so the archive is split and unpacking must join them.
  monkeypatch.setattr(pack, "PART_BYTES", 40_000)
  out = tmp_path / "out"
  assert main(["pack", str(stopped_dir), str(out / "row.pack")]) == 0
  parts = sorted(out.iterdir())
  assert len(parts) > 1 and all(p.name.startswith("row.pack.") for p in parts)
  assert all(p.stat().st_size <= 40_000 for p in parts)
  manifest = pack.read_manifest(out / "row.pack")
  assert manifest["run"] == place.as_posix() and manifest["checkpoint_step"] == stopped["step"]
  assert manifest["best_step"] == stopped["best_step"]

  # Another clone: nothing but the archive and the data, found where lra looks by default. The
  # command unpack prints resumes the run as printed.
  second = (tmp_path / "b" / "results", data)
  assert main(["unpack", str(parts[1]), "--results-dir", str(second[0])]) == 0
  resumed_dir = second[0] / place
  assert (resumed_dir / "checkpoints" / str(stopped["step"])).is_dir()
  said = capsys.readouterr().out.strip().splitlines()
  assert said[-1] == ("resume with: lra run listops latte --preset smoke --run-dir "
                      f"{resumed_dir} " + " ".join(f"--config.{o}" for o in sorted(OVERRIDES)))
  monkeypatch.setenv("LRA_DATA_DIR", str(data))
  assert main(shlex.split(said[-1].removeprefix("resume with: "))[1:]) == 0
  assert f"resuming {resumed_dir} from step {stopped['step']}" in capsys.readouterr().err
  resumed = json.loads((resumed_dir / "final.json").read_text())
  for key in SCORES:
    assert resumed[key] == expected[key], key
  assert _curve(resumed_dir) == _curve(clean)
  ours, theirs = _state(resumed_dir, 20), _state(clean, 20)
  assert len(jax.tree.leaves(ours)) == len(jax.tree.leaves(theirs)) > 0
  for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):  # params and optimizer state
    assert np.asarray(a).tobytes() == np.asarray(b).tobytes()  # bit for bit

  # The finished run packs without its optimizer state; `lra eval` scores it from the archive.
  assert main(["pack", str(resumed_dir), str(out / "done.pack")]) == 0
  done = pack.read_manifest(out / "done.pack")
  assert done["status"] == "complete" and done["checkpoint_step"] is None
  assert not any(name.startswith("checkpoints/20/") for name in done["files"])
  third = tmp_path / "c" / "results"
  assert main(["unpack", str(out / "done.pack"), "--results-dir", str(third)]) == 0
  capsys.readouterr()
  assert main(["eval", str(third / place), "--data-dir", str(data)]) == 0
  said = capsys.readouterr().out
  assert f"best checkpoint (step {expected['best_step']})" in said
  assert f"accuracy {decimals(100 * expected['test_accuracy'])}%" in said


LAYER = """import flax.linen as nn


class Scale(nn.Module):
  dim: int
  num_heads: int
  max_len: int
  factor: float = 1.0
  use_bias: bool = False

  @nn.compact
  def __call__(self, x, mask, *, deterministic, carry=None):
    return x * self.factor, carry
"""


def test_the_resume_command_rebuilds_the_run_from_its_config(tmp_path, monkeypatch):
  """Task, own mixer by its spec, preset, seed and departures: the command resolves to the very
  config it was rebuilt from; with the mixer's file not (yet) in place, every setting of its
  block is named, which resolves to the same."""
  from lra.runs.command import run_config
  from lra.runs.config_loading import resolve_config
  monkeypatch.chdir(tmp_path)
  (tmp_path / "my_layers").mkdir()
  (tmp_path / "my_layers" / "scale.py").write_text(LAYER)
  spec = "my_layers/scale.py:Scale"
  config = resolve_config("synthetic", spec, "smoke", [
      "mixers.Scale.factor=0.5", "train.num_steps=9", "train.seed=3", "model.dim=48"]).to_dict()
  run_dir = tmp_path / "runs" / "x y"
  expected = (f"lra run synthetic {spec} --preset smoke --seed 3 --run-dir '{run_dir}' "
              "--config.mixers.Scale.factor=0.5 --config.model.dim=48 --config.train.num_steps=9")
  command = pack.resume_command(config, run_dir)
  assert command == expected
  assert run_config(shlex.split(command)[1:]).to_dict() == config
  (tmp_path / "my_layers" / "scale.py").rename(tmp_path / "elsewhere.py")
  assert pack.resume_command(config, run_dir) == expected.replace(
      "--config.mixers.Scale.factor=0.5", "--config.mixers.Scale.factor=0.5 "
      "--config.mixers.Scale.use_bias=False")
  builtin = resolve_config("listops", "latte", "laptop", ["log.tensorboard=True"]).to_dict()
  assert pack.resume_command(builtin, Path("r")) == ("lra run listops latte --preset laptop "
                                                     "--run-dir r --config.log.tensorboard=True")
  assert pack.resume_command({**builtin, "preset": "gone"}, Path("r")) is None


def test_a_damaged_or_missing_part_and_a_folder_with_state_are_refused(reference, tmp_path,
                                                                        monkeypatch, capsys):
  clean = reference[0]
  monkeypatch.setattr(pack, "PART_BYTES", 20_000)
  written = pack.pack(clean, tmp_path / "x.pack")
  assert len(written) >= 3
  # A changed byte in the data of the best parameters: named, nothing written.
  whole = b"".join(part.read_bytes() for part in written)
  with tarfile.open(fileobj=io.BytesIO(whole)) as tar:
    member = next(m for m in tar.getmembers() if m.name.endswith(".msgpack"))
  at = member.offset_data + member.size // 2
  damaged = bytearray(whole)
  damaged[at] ^= 0xFF
  changed = tmp_path / "changed"
  changed.mkdir()
  for index, part in enumerate(written):
    (changed / part.name).write_bytes(damaged[index * 20_000:(index + 1) * 20_000])
  results = tmp_path / "results"
  assert main(["unpack", str(changed / "x.pack"), "--results-dir", str(results)]) == 2
  err = capsys.readouterr().err
  assert err == (f"lra: error: {changed / 'x.pack'}: {member.name} differs from what was packed "
                 "(size or sha256): copy the archive and every part again\n"), err
  assert not (results / "runs").exists()
  # A missing middle part.
  written[1].unlink()
  assert main(["unpack", str(written[0]), "--results-dir", str(results)]) == 2
  assert "part x.pack.2 is missing (found parts 1, 3" in capsys.readouterr().err
  # A run folder there that holds state already.
  whole = pack.pack(clean, tmp_path / "y.pack")
  assert main(["unpack", str(whole[0]), "--results-dir", str(results)]) == 0
  assert main(["unpack", str(whole[0]), "--results-dir", str(results)]) == 2
  err = capsys.readouterr().err
  assert "already holds checkpoints" in err and "unpacking would mix two states" in err
  # Packing again replaces every part of the older archive of that name.
  monkeypatch.setattr(pack, "PART_BYTES", 10**9)
  again = pack.pack(clean, tmp_path / "x.pack")
  assert again == [tmp_path / "x.pack"] and not list(tmp_path.glob("x.pack.*"))


def test_a_run_without_a_checkpoint_cannot_be_packed(tmp_path, capsys):
  run_dir = tmp_path / "runs" / "listops" / "latte" / "r"
  run_dir.mkdir(parents=True)
  (run_dir / "config.json").write_text(json.dumps({"task": "listops"}))
  (run_dir / "final.json").write_text(json.dumps({"status": "interrupted", "step": 3}))
  assert main(["pack", str(run_dir), str(tmp_path / "r.pack")]) == 2
  assert "holds no checkpoint" in capsys.readouterr().err
  assert main(["pack", str(tmp_path), str(tmp_path / "r.pack")]) == 2
  assert "is not a run folder (no config.json)" in capsys.readouterr().err


def test_committed_archives_are_not_ignored_but_checkpoints_are():
  def ignored(path):
    return subprocess.run(["git", "check-ignore", "--no-index", "-q", path],
                          cwd=ROOT).returncode == 0
  run_dir = "results/runs/listops/latte/paper_seed0"
  assert not ignored(f"{run_dir}/run.pack") and not ignored(f"{run_dir}/run.pack.2")
  assert ignored(f"{run_dir}/checkpoints/1500/state/d/abc")
  assert ignored(f"{run_dir}/checkpoints/best_params/1500.msgpack")


def test_unpack_into_a_named_run_folder_and_a_study_run_resumes_from_its_archive(
    reference, tmp_path, monkeypatch, capsys):
  # A run made with `lra run --run-dir` (a study's) goes back to a folder of the user's choosing.
  archive = pack.pack(reference[0], tmp_path / "r.pack")[0]
  target = tmp_path / "study" / "mine"
  assert main(["unpack", str(archive), "--run-dir", str(target)]) == 0
  assert (target / "config.json").is_file() and any((target / "checkpoints").iterdir())
  assert capsys.readouterr().out.startswith(f"{target}: complete at step 20 of 20")
  assert sorted(p.name for p in target.parent.iterdir()) == ["mine"]  # no scratch left
  assert main(["pack", str(target), str(tmp_path / "again.pack")]) == 0
  assert f"lra unpack {tmp_path / 'again.pack'} --run-dir {target}" in capsys.readouterr().out
  # tools/pathfinder_study.py unpacks a committed archive where checkpoints are missing, once.
  import sys  # pylint: disable=import-outside-toplevel
  sys.path.insert(0, str(ROOT / "tools"))
  import pathfinder_study as study  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(study, "ROOT", tmp_path)
  monkeypatch.setattr(study, "OUT", tmp_path / "results" / "pathfinder_study")
  folder = study.OUT / "carried"
  folder.mkdir(parents=True)
  (folder / "run.pack").write_bytes(archive.read_bytes())
  calls = []
  monkeypatch.setattr(study.subprocess, "call",
                      lambda command, cwd, env: calls.append(command) or 0)
  carried = study.StudyRun("carried", "latte", "?")
  assert study.run(carried, core=None) == 0 and study.run(carried, core=None) == 0
  assert any((folder / "checkpoints").iterdir())
  assert capsys.readouterr().out.count("unpacked results/pathfinder_study/carried/run.pack") == 1
  assert calls == [carried.command()] * 2


def _finished_run(root: Path, curve_bytes: int, seed: int) -> Path:
  """A complete run folder (no checkpoint to carry) whose archive is about `curve_bytes`."""
  run_dir = root / "runs" / "listops" / "latte" / "r"
  run_dir.mkdir(parents=True, exist_ok=True)
  (run_dir / "config.json").write_text(json.dumps({"task": "listops"}))
  (run_dir / "final.json").write_text(json.dumps({"status": "complete", "step": 3}))
  noise = np.random.default_rng(seed).integers(0, 2**32, curve_bytes // 4, np.uint32)
  (run_dir / "metrics.jsonl").write_bytes(noise.tobytes())  # incompressible: sizes are known
  return run_dir


def test_packing_over_an_archive_keeps_it_until_the_new_one_is_written(tmp_path, monkeypatch):
  monkeypatch.setattr(pack, "PART_BYTES", 20_000)
  run_dir = _finished_run(tmp_path, 45_000, seed=0)
  old = pack.pack(run_dir, tmp_path / "run.pack")
  assert [p.name for p in old] == ["run.pack.1", "run.pack.2", "run.pack.3"]
  committed = {p.name: p.read_bytes() for p in old}
  # The disk fills while the new archive's second part is written: the old archive (the
  # committed copy) is whole, and no part of the new one is left beside it.
  _finished_run(tmp_path, 20_000, seed=1)
  real_write, calls = Path.write_bytes, []

  def full_disk(path, data):
    calls.append(path)
    if len(calls) == 2:
      raise OSError(28, "No space left on device")
    return real_write(path, data)
  monkeypatch.setattr(Path, "write_bytes", full_disk)
  with pytest.raises(OSError, match="No space left"):
    pack.pack(run_dir, tmp_path / "run.pack")
  monkeypatch.setattr(Path, "write_bytes", real_write)
  assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == committed
  assert pack.read_manifest(tmp_path / "run.pack")["files"]["metrics.jsonl"]["bytes"] == 45_000
  # Written in full, the new archive replaces the old: its third part, no longer one, goes.
  new = pack.pack(run_dir, tmp_path / "run.pack")
  assert [p.name for p in new] == ["run.pack.1", "run.pack.2"]
  assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["run.pack.1", "run.pack.2"]
  assert pack.read_manifest(tmp_path / "run.pack")["files"]["metrics.jsonl"]["bytes"] == 20_000
  # Whole over parts, and parts over a whole.
  monkeypatch.setattr(pack, "PART_BYTES", 10**9)
  assert pack.pack(run_dir, tmp_path / "run.pack") == [tmp_path / "run.pack"]
  assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["run.pack"]
  monkeypatch.setattr(pack, "PART_BYTES", 20_000)
  assert len(pack.pack(run_dir, tmp_path / "run.pack")) == 2
  assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["run.pack.1", "run.pack.2"]
