"""A researcher's own mixer, kept outside the suite: found by import path or entry point, checked
by `lra check`, trained by `lra run`, swept, benched, and named in the tables by its source."""
import csv
import hashlib
import json
import sys
from pathlib import Path

import pytest

from lra.bench import step_time
from lra.cli import sweep
from lra.cli import main
from lra.runs.config_loading import default_run_dir, resolve_config
from lra.models.build import build_model
from lra.models.mixers import default_settings, find_mixer
from lra.models.mixers.contract import PROPERTIES

ROOT = Path(__file__).resolve().parents[1]


def _readme_example() -> str:
  """The layer in README.md's "Test your own layer": the README's example is the tested one."""
  section = (ROOT / "README.md").read_text().split("## Test your own layer", 1)[1]
  return section.split("```python\n", 1)[1].split("```", 1)[0]


MEAN_GATE = _readme_example()
# The same layer averaging over every position, pads included: it leaks pads.
LEAKY = MEAN_GATE.replace("class MeanGate", "class Leaky").replace(
    "jnp.sum(jnp.where(real, x, 0.0), axis=1) / jnp.maximum(jnp.sum(real, axis=1), 1)",
    "jnp.mean(x, axis=1)")
assert LEAKY.count("jnp.mean(x, axis=1)") == 1


@pytest.fixture
def layer_file(tmp_path):
  path = tmp_path / "my_layers" / "mean_gate.py"
  path.parent.mkdir()
  path.write_text(MEAN_GATE + LEAKY[LEAKY.index("class Leaky"):])
  return path


def _sha8(path):
  return hashlib.sha256(path.read_bytes()).hexdigest()[:8]


def test_own_mixer_trains_records_its_source_and_is_tabled(layer_file, tmp_path):
  spec, results = f"{layer_file}:MeanGate", tmp_path / "results"
  assert main(["run", "synthetic", spec, "--preset", "smoke", "--quiet", "--data-dir",
               str(tmp_path / "data"), "--results-dir", str(results),
               "--config.mixers.MeanGate.hidden=16"]) == 0
  label = f"MeanGate@{_sha8(layer_file)}"
  run_dir = results / "runs" / "synthetic" / label / "smoke+mixers.MeanGate.hidden=16_seed0"
  config = json.loads((run_dir / "config.json").read_text())
  final = json.loads((run_dir / "final.json").read_text())
  source = {"spec": spec, "sha256": hashlib.sha256(layer_file.read_bytes()).hexdigest()}
  assert config["mixer_source"] == source and final["mixer_source"] == source
  assert config["model"]["mixer"] == "MeanGate" and config["mixers"]["MeanGate"] == {"hidden": 16}
  assert final["status"] == "complete" and final["mixer"] == label

  assert main(["table", "--results-dir", str(results)]) == 0
  with open(results / "tables" / "synthetic.csv", newline="") as f:
    rows = csv.DictReader(line for line in f if not line.startswith("#"))
    [row] = [r for r in rows if r["source"] == "yours"]
  assert row["mixer"] == label and row["runs"] == run_dir.name
  assert float(row["test_accuracy"]) == pytest.approx(100 * final["test_accuracy"])


def test_an_edited_file_is_a_new_run_and_the_old_config_refuses_to_build(layer_file, tmp_path):
  spec = f"{layer_file}:MeanGate"
  before = resolve_config("synthetic", spec, "smoke")
  layer_file.write_text(layer_file.read_text() + "\n# hidden=64 works better\n")
  after = resolve_config("synthetic", spec, "smoke")
  assert before.mixer_source.sha256 != after.mixer_source.sha256
  assert default_run_dir(before, tmp_path) != default_run_dir(after, tmp_path)
  spec_of_task = type("Spec", (), dict(vocab_size=8, seq_len=16, num_classes=2, dual=False))
  with pytest.raises(ValueError, match="changed since this config was made"):
    build_model(before, spec_of_task)


def test_lra_check_passes_the_good_layer_and_names_what_the_leaky_one_breaks(layer_file,
                                                                             capsys):
  assert main(["check", f"{layer_file}:MeanGate", "--config.mixers.MeanGate.hidden=8"]) == 0
  out = capsys.readouterr().out
  assert "hidden=8" in out and "meets the mixer contract" in out
  assert out.count("PASS ") == len(PROPERTIES)  # every property, memory at T=8192 included
  assert main(["check", f"{layer_file}:Leaky"]) == 1
  out = capsys.readouterr().out
  assert "FAIL  padding invariance" in out and "PASS  shape" in out
  assert out.strip().splitlines()[-1].endswith("properties fail: padding invariance")
  # Asked for the fitting screen, it says why none ran instead of ending silently.
  assert main(["check", f"{layer_file}:Leaky", "--fit"]) == 1
  assert capsys.readouterr().out.strip().splitlines()[-1].endswith(
      "padding invariance; --fit not run: it trains only a layer that meets the contract")
  assert main(["check", f"{layer_file}:MeanGate", "--config.model.dim=8"]) == 2
  assert "reads only --config.mixers" in capsys.readouterr().err


def test_an_error_in_ones_mixer_is_one_block_at_its_line_and_a_wrong_dtype_fails(
    layer_file, capsys, monkeypatch):
  """An exception raised in the user's own file is reported as that (type, message, file:line
  and the line), once, with the properties it stopped unchecked, not as a property's failure; a
  y of another dtype than x's fails `dtype`; `--fit` ends on one verdict for all it checked."""
  monkeypatch.chdir(layer_file.parent.parent)
  typo = layer_file.parent / "typo.py"
  typo.write_text(MEAN_GATE.replace("nn.Dense(self.hidden)", "nn.Dens(self.hidden)"))
  assert main(["check", "my_layers/typo.py:MeanGate"]) == 1
  lines = capsys.readouterr().out.strip().splitlines()
  number = 1 + typo.read_text().splitlines().index(next(
      t for t in typo.read_text().splitlines() if "nn.Dens(" in t))
  assert lines[1] == (f"ERROR my_layers/typo.py:{number} in __call__: AttributeError: module "
                      "'flax.linen' has no attribute 'Dens'")
  assert "nn.Dens(self.hidden)" in lines[2]
  assert not any(line.startswith(("FAIL", "PASS", "SKIP")) for line in lines)
  assert lines[-1].startswith("lra check: my_layers/typo.py:MeanGate raised an error in its own "
                              "code")
  half = layer_file.parent / "half.py"
  half.write_text(MEAN_GATE.replace("gate[:, None, :], carry",
                                    "gate[:, None, :]).astype(jnp.float16), carry").replace(
                                        "return nn.Dense(self.dim)(x)", "return (nn.Dense("
                                        "self.dim)(x)"))
  assert main(["check", "my_layers/half.py:MeanGate"]) == 1
  out = capsys.readouterr().out
  assert "FAIL  dtype               y float16 for x float32" in out
  from lra.bench import fit_screen
  frozen = fit_screen.Fit("MeanGate", "squares", (), 0.5, 0.69, 30.0)
  monkeypatch.setattr(fit_screen, "screen", lambda *a, **k: frozen)
  assert main(["check", "my_layers/mean_gate.py:MeanGate", "--fit"]) == 1
  last = capsys.readouterr().out.strip().splitlines()[-1]
  assert last == ("lra check: my_layers/mean_gate.py:MeanGate meets the mixer contract and does "
                  f"not fit the screen (50.0% < {fit_screen.BAR:.0%}): it will not learn a "
                  "table's task")


def test_import_forms_and_their_errors(layer_file, monkeypatch):
  monkeypatch.syspath_prepend(str(layer_file.parent))
  by_module = find_mixer("mean_gate:MeanGate")
  assert by_module.key == "MeanGate" and by_module.source["spec"] == "mean_gate:MeanGate"
  assert by_module.source["sha256"] == hashlib.sha256(layer_file.read_bytes()).hexdigest()
  assert default_settings(by_module.cls) == {"hidden": 64}
  with pytest.raises(KeyError, match="path/to/file.py:ClassName"):
    find_mixer("MeanGate")
  with pytest.raises(FileNotFoundError, match="no file"):
    find_mixer(f"{layer_file.parent}/nope.py:MeanGate")
  with pytest.raises(KeyError, match="no class Nope.*MeanGate, Leaky"):
    find_mixer(f"{layer_file}:Nope")
  with pytest.raises(KeyError, match="no module not_a_module"):
    find_mixer("not_a_module:MeanGate")
  layer_file.write_text("class Plain:\n  pass\n")
  with pytest.raises(ValueError, match="expected a flax.linen.Module with fields dim"):
    find_mixer(f"{layer_file}:Plain")


def test_sweep_and_bench_take_an_import_path(layer_file, tmp_path):
  spec = f"{layer_file}:MeanGate"
  [job] = sweep.plan(["synthetic"], [spec], [0], preset="smoke", results_dir=tmp_path)
  assert job.run_dir == default_run_dir(resolve_config("synthetic", spec, "smoke"), tmp_path)
  assert job.argv[:3] == ("run", "synthetic", spec)
  record = step_time.measure(spec, 16, 1, dim=16, num_layers=1, num_heads=2, num_steps=1,
                         warmup_steps=0, min_time_s=0.0)
  assert record["status"] == "ok" and record["mixer"] == f"MeanGate@{_sha8(layer_file)}"


def test_an_installed_package_registers_mixers_by_entry_point(tmp_path, monkeypatch, capsys):
  """A dist-info folder on sys.path is what `pip install` leaves: its entry_points.txt names the
  mixer in the lra.mixers group."""
  package = tmp_path / "tiny_lra_mixers"
  package.mkdir()
  (package / "__init__.py").write_text(MEAN_GATE)
  dist = tmp_path / "tiny_lra_mixers-0.1.dist-info"
  dist.mkdir()
  (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-lra-mixers\nVersion: 0.1\n")
  (dist / "entry_points.txt").write_text("[lra.mixers]\nmean_gate = tiny_lra_mixers:MeanGate\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.delitem(sys.modules, "tiny_lra_mixers", raising=False)

  found = find_mixer("mean_gate")
  assert found.key == "mean_gate" and found.cls.__name__ == "MeanGate"
  assert found.source["import"] == "tiny_lra_mixers:MeanGate"
  assert found.source["distribution"] == "tiny-lra-mixers==0.1"
  config = resolve_config("synthetic", "mean_gate", "smoke", ["mixers.mean_gate.hidden=4"])
  assert config.model.mixer == "mean_gate" and config.mixers.mean_gate.hidden == 4
  sha8 = hashlib.sha256((package / "__init__.py").read_bytes()).hexdigest()[:8]
  assert default_run_dir(config, tmp_path).parent.name == f"mean_gate@{sha8}"
  assert main(["list"]) == 0
  assert "tiny_lra_mixers:MeanGate (installed from tiny-lra-mixers)" in capsys.readouterr().out


def test_a_mixer_that_raises_ends_the_run_in_one_line_with_its_traceback_logged(tmp_path,
                                                                               capsys):
  path = tmp_path / "broken.py"
  path.write_text(MEAN_GATE.replace("class MeanGate", "class Broken").replace(
      "def __call__(self, x, mask, *, deterministic, carry=None):",
      "def __call__(self, x, mask, *, deterministic, carry=None):\n"
      "    raise RuntimeError('the broken mixer fails\\nsecond line')"))
  run_dir = tmp_path / "run"
  assert main(["run", "synthetic", f"{path}:Broken", "--preset", "smoke", "--quiet",
               "--data-dir", str(tmp_path / "data"), "--run-dir", str(run_dir)]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  line = 1 + path.read_text().splitlines().index("    raise RuntimeError('the broken mixer fails"
                                                 "\\nsecond line')")
  assert err[-1] == (f"lra: error: RuntimeError: the broken mixer fails at {path}:{line} in "
                     f"__call__ (the traceback is in {run_dir / 'error.log'})")
  assert not any("Traceback" in line for line in err)
  final = json.loads((run_dir / "final.json").read_text())
  assert final["status"] == "failed" and "the broken mixer fails" in final["stop_reason"]
  log = (run_dir / "error.log").read_text()
  assert log.startswith("Traceback") and "second line" in log and str(path) in log


@pytest.mark.parametrize("command", ["check", "run"])
def test_a_file_that_fails_to_import_is_one_line_at_its_own_line(command, tmp_path, monkeypatch,
                                                                 capsys):
  """A syntax error, or an exception while the file is imported (also in a helper module of the
  user's), names the user's file and line, never the suite's import machinery; exit 2."""
  monkeypatch.chdir(tmp_path)
  folder = tmp_path / "my_layers"
  folder.mkdir()
  lines = MEAN_GATE.replace("class MeanGate", "class Broken").splitlines()
  call = next(i for i, line in enumerate(lines) if "gate = nn.sigmoid(" in line)
  (folder / "broken_syntax.py").write_text("\n".join(
      lines[:call] + [lines[call].replace("nn.sigmoid(", "nn.sigmoid((")] + lines[call + 1:]))
  (folder / "name_error.py").write_text("import flax.linen as nn\n\nscale = undefined_name\n")
  (folder / "helper.py").write_text("x = 1\ny = x / 0\n")
  monkeypatch.syspath_prepend(str(folder))
  (folder / "uses_helper.py").write_text("import flax.linen as nn\nimport helper\n")
  monkeypatch.delitem(sys.modules, "helper", raising=False)
  extra = ["synthetic"] if command == "run" else []
  expected = {
      "broken_syntax": f"my_layers/broken_syntax.py:{call + 1}: SyntaxError: '(' was never closed",
      "name_error": ("my_layers/name_error.py:3: NameError: name 'undefined_name' is not "
                     "defined"),
      "uses_helper": ("my_layers/helper.py:2: ZeroDivisionError: division by zero (imported "
                      "from my_layers/uses_helper.py:2;")}
  for stem, start in expected.items():
    spec = f"my_layers/{stem}.py:Broken"
    argv = [command, *extra, spec] + (["--preset", "smoke", "--quiet", "--results-dir",
                                       str(tmp_path / "results")] if command == "run" else [])
    assert main(argv) == 2, stem
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1, captured.err
    assert captured.err.startswith(f"lra: error: {start}"), captured.err
    assert f"importing mixer '{spec}'" in captured.err
    assert f"the whole traceback: python my_layers/{stem}.py" in captured.err
  assert not (tmp_path / "results").exists()  # refused before any run folder


def test_a_wrong_shape_fails_the_shape_alone_and_stops_a_run_before_training(tmp_path, capsys):
  """The other properties would each fail on the same broadcasting error; they are skipped. A run
  says the same in one line before training (traced at the run's sizes: T = 32 tokens + CLS)."""
  path = tmp_path / "wrong.py"
  path.write_text(MEAN_GATE.replace("class MeanGate", "class Wrong").replace(
      "return nn.Dense(self.dim)(x) * gate[:, None, :], carry",
      "return nn.Dense(self.dim // 2)(x) * gate[:, None, :self.dim // 2], carry") + (
      MEAN_GATE.replace("class MeanGate", "class Alone").replace(
          "* gate[:, None, :], carry", "* gate[:, None, :]")[MEAN_GATE.index("class MeanGate"):]))
  assert main(["check", f"{path}:Wrong"]) == 1
  lines = capsys.readouterr().out.strip().splitlines()
  assert lines[1] == ("FAIL  shape               returned [2, 24, 8] for x [2, 24, 16]: a mixer "
                      "returns x's shape")
  assert [line.split()[0] for line in lines[2:-1]] == ["SKIP"] * (len(PROPERTIES) - 1)
  assert lines[-1] == (f"lra check: 1 of {len(PROPERTIES)} properties fail: shape; "
                       f"{len(PROPERTIES) - 1} skipped until it passes")
  assert main(["check", f"{path}:Alone"]) == 1
  assert ("returned [2, 24, 16] for x [2, 24, 16]: a mixer returns the pair (y, carry)"
          in capsys.readouterr().out)

  run_dir = tmp_path / "run"
  assert main(["run", "synthetic", f"{path}:Wrong", "--preset", "smoke", "--quiet",
               "--data-dir", str(tmp_path / "data"), "--run-dir", str(run_dir)]) == 2
  err = capsys.readouterr().err.strip().splitlines()  # after the data generator's line
  assert err[-1:] == [f"lra: error: mixer '{path}:Wrong' returned [1, 33, 16] for x [1, 33, 32]: a "
                 f"mixer returns x's shape (`lra check {path}:Wrong` checks the whole contract)"]
  assert not any("Traceback" in line for line in err)
  assert not (run_dir / "final.json").exists()  # refused before training, nothing recorded


def test_a_stopped_run_of_an_edited_file_says_restore_it_or_start_anew_and_nothing_loops(
    layer_file, tmp_path, capsys, monkeypatch):
  """`lra status` offered `--config.mixer_source.sha256=<old>`, which failed with "run the
  command again", and so on; the dry run said "lra run resumes it" where the run said "holds
  another run". Now all say: restore the file, or start a new run with a command that works."""
  from lra.report import run_summary
  monkeypatch.chdir(layer_file.parent.parent)
  spec, results = "my_layers/mean_gate.py:MeanGate", Path("results")
  config = resolve_config("synthetic", spec, "smoke", ["train.num_steps=40"])
  run_dir = default_run_dir(config, results)
  run_dir.mkdir(parents=True)
  (run_dir / "config.json").write_text(json.dumps(config.to_dict()))
  final = {"status": "interrupted", "task": "synthetic", "mixer": "MeanGate", "preset": "smoke",
           "step": 20, "num_steps": 40, "best_step": -1, "val_accuracy": -1.0}
  (run_dir / "final.json").write_text(json.dumps(final))
  old = layer_file.read_text()
  layer_file.write_text(old + "\n# hidden=64 works better\n")

  said = run_summary.state_text(final, run_dir)
  assert said.startswith("stopped at step 20 of 40") and "mixer_source" not in said
  assert (f"the file of {spec} has changed since this run began (sha256 {_sha8_of(old)} then, "
          f"now {_sha8(layer_file)}): restore it to resume, or start a new run with "
          f"`lra run synthetic {spec} --preset smoke --config.train.num_steps=40`") in said
  words = ["run", "synthetic", spec, "--preset", "smoke", "--run-dir", str(run_dir),
           "--config.train.num_steps=40"]
  assert main([*words, "--dry-run"]) == 0
  folder = capsys.readouterr().out.splitlines()[1]
  assert folder.startswith(f"run folder: {run_dir} (exists, interrupted at step 20; `lra run` "
                           f"refuses it: it cannot resume: the file of {spec} has changed")
  for extra in ([], [f"--config.mixer_source.sha256={config.mixer_source.sha256}"]):
    assert main([*words, *extra, "--quiet"]) == 2  # refused before any data is made
    err = capsys.readouterr().err
    assert f"{run_dir} cannot resume: the file of {spec} has changed since" in err, err
    assert "run the command again" not in err
  new = said.split("start a new run with `", 1)[1].split("`", 1)[0]
  assert main([*new.split()[1:], "--dry-run"]) == 0
  assert capsys.readouterr().out.splitlines()[1].endswith("(new)")

  layer_file.write_text(old)  # restored: the same run resumes
  said = run_summary.state_text(final, run_dir)
  assert said.endswith(f"`lra run synthetic {spec} --preset smoke --run-dir {run_dir} "
                       "--config.train.num_steps=40` resumes it")
  assert main([*words, "--dry-run"]) == 0
  assert "resumes it" in capsys.readouterr().out.splitlines()[1]


def _sha8_of(text):
  return hashlib.sha256(text.encode()).hexdigest()[:8]


NAN_GATE = MEAN_GATE.replace("class MeanGate", "class NanGate").replace(
    "* gate[:, None, :], carry", "* gate[:, None, :] * jnp.log(mean[:, None, :] * 0 - 1), carry")


def test_check_shows_max_len_and_counts_one_cause_once(tmp_path, capsys):
  """A layer whose output is NaN failed seven properties, read as seven problems; it is one."""
  path = tmp_path / "nan_gate.py"
  path.write_text(NAN_GATE)
  assert main(["check", f"{path}:NanGate"]) == 1
  lines = capsys.readouterr().out.strip().splitlines()
  assert ", T=24 (2 rows, the second ending in 7 pads), max_len=32 (T and the 8 pads" in lines[0]
  assert "called as (x, mask, *, deterministic, carry=None) -> (y, carry)" in lines[0]
  assert lines[3].startswith("FAIL  finite ") and not lines[3].endswith("[follows from finite]")
  follow = [name for name in PROPERTIES for line in lines
            if line.startswith(f"FAIL  {name:<19} ") and line.endswith("[follows from finite]")]
  assert {"padding invariance", "jit", "finite gradients", "forward derivatives"} <= set(follow)
  assert lines[-1].startswith(f"lra check: {1 + len(follow)} of {len(PROPERTIES)} properties "
                              f"fail: finite; {len(follow)} more follow from finite, one cause")


def test_a_wrong_call_signature_quotes_the_expected_one(tmp_path, capsys):
  path = tmp_path / "old_style.py"
  path.write_text(MEAN_GATE.replace("class MeanGate", "class OldStyle").replace(
      "def __call__(self, x, mask, *, deterministic, carry=None):",
      "def __call__(self, x, mask, deterministic):").replace(", carry  # carry", ", None  # c"))
  expected = ("__call__(x, mask, deterministic) cannot be called as the encoder calls a mixer "
              "(got an unexpected keyword argument 'carry'): a mixer is called as "
              "(x, mask, *, deterministic, carry=None) -> (y, carry)")
  assert main(["check", f"{path}:OldStyle"]) == 1
  assert capsys.readouterr().out.splitlines()[1] == f"FAIL  shape               {expected}"
  assert main(["run", "synthetic", f"{path}:OldStyle", "--preset", "smoke", "--quiet",
               "--data-dir", str(tmp_path / "data"), "--run-dir", str(tmp_path / "run")]) == 2
  err = capsys.readouterr().err.strip()
  assert expected in err.splitlines()[-1] and "Traceback" not in err, err  # before training


def test_nan_from_the_layer_names_the_forward_pass_and_lra_check(tmp_path, capsys):
  """`loss is nan at step 2: diverged` read as an optimisation problem."""
  path = tmp_path / "nan_gate.py"
  path.write_text(NAN_GATE)
  run_dir = tmp_path / "run"
  assert main(["run", "synthetic", f"{path}:NanGate", "--preset", "smoke", "--quiet",
               "--data-dir", str(tmp_path / "data"), "--run-dir", str(run_dir)]) == 1
  out = capsys.readouterr().out
  assert ("not finite in its forward pass from the initial parameters (not training "
          "diverging)") in out
  assert f"`lra check {path}:NanGate` runs the mixer on small inputs" in out
  final = json.loads((run_dir / "final.json").read_text())
  assert final["status"] == "diverged" and final["stop_reason"].startswith("forward pass: ")
