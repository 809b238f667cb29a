"""Mistakes vs bugs (lra/errors.py, lra.cli.main): a user's or their machine's error is one
`lra: error:` line and exit code 2; anything else is a bug, whose traceback `lra` keeps (exit 1)."""
import errno

import pytest

from lra import errors
from lra.report import results, status
from lra.cli import main


def _bug(*args, **kwargs):
  row = {"id": 3, "run": "runs/listops/latte/paper_seed0"}
  return row["source"]  # a ledger row read without the field it lacks: KeyError('source')


@pytest.mark.parametrize("command, module, name", [
    (["status", "--mine-only"], status, "ledger_costs"),
    (["table", "--mine-only"], results, "load_runs"),
])
def test_a_bug_in_a_command_outside_a_run_keeps_its_traceback(command, module, name, tmp_path,
                                                              capsys, monkeypatch):
  monkeypatch.setattr(module, name, _bug)
  assert main([*command, "--results-dir", str(tmp_path)]) == 1
  err = capsys.readouterr().err
  assert err.startswith("Traceback (most recent call last):")
  assert 'return row["source"]' in err and "in _bug" in err  # where the bug is
  last = err.strip().splitlines()[-1]
  assert last.startswith("lra: internal error: KeyError: 'source' (a bug in lra, not a mistake")
  assert "lra: error:" not in err


def test_a_users_mistake_is_still_one_line_and_exit_2(tmp_path, capsys):
  assert main(["status", "--presets", "papr"]) == 2
  err = capsys.readouterr().err
  assert err.startswith("lra: error: lra status --presets: unknown papr; valid presets: paper")
  assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
  assert main(["run", "listops", "nosuchmixer", "--dry-run"]) == 2
  err = capsys.readouterr().err.strip()
  # UnknownName is a KeyError that prints without KeyError's quotes.
  assert err.startswith("lra: error: Unknown mixer 'nosuchmixer'. Valid mixers: ")
  assert len(err.splitlines()) == 1


def test_the_machines_refusal_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
  def full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "tables"))

  monkeypatch.setattr(results, "load_runs", full)
  assert main(["table", "--mine-only", "--results-dir", str(tmp_path)]) == 2
  err = capsys.readouterr().err.strip()
  assert err == f"lra: error: [Errno 28] No space left on device: '{tmp_path / 'tables'}'"


def test_user_errors_are_the_builtins_their_callers_catch():
  assert isinstance(errors.BadValue("x"), ValueError)
  assert isinstance(errors.UnknownName("x"), KeyError) and str(errors.UnknownName("x y")) == "x y"
  assert isinstance(errors.NotFound("x"), FileNotFoundError)
  assert isinstance(errors.Conflict("x"), FileExistsError)
  assert isinstance(errors.MissingPackage("x"), ImportError)
  assert errors.is_mistake(errors.NotFound("no such run"))
  assert errors.is_mistake(PermissionError(errno.EACCES, "Permission denied", "/x"))
  # A KeyError, ValueError or errno-less OSError raised by the suite's code is a bug.
  assert not any(errors.is_mistake(e) for e in (KeyError("source"), ValueError("x"), OSError("x")))


def test_a_users_file_is_named_wherever_the_interpreter_lives(tmp_path, monkeypatch):
  """With a system Python, sys.prefix is /usr, and a container keeps a user's code in
  /usr/src/app: an error raised there is still the user's frame, named as such."""
  import sys

  from lra.base import tracebacks
  app = tmp_path / "usr" / "src" / "app"
  app.mkdir(parents=True)
  (app / "my_layer.py").write_text("def call():\n  raise ValueError('the layer broke')\n")
  monkeypatch.setattr(sys, "prefix", str(tmp_path / "usr"))
  monkeypatch.syspath_prepend(str(app))
  import my_layer  # noqa: PLC0415 - written above
  with pytest.raises(ValueError) as caught:
    my_layer.call()
  frame = tracebacks.user_frame(caught.value)
  assert frame is not None and frame.filename == str(app / "my_layer.py"), frame
  assert tracebacks.where(frame).endswith("my_layer.py:2 in call")
