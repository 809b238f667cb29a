"""The `lra` command: a parser made of one module per command (lra/cli/*.py, each adding its own),
and how a failure ends: a mistake in one line (exit 2), a bug with its traceback (exit 1)."""
from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Sequence

from lra.machine import stop_after  # first: it notes when the process started (--stop-after)
from lra import errors  # light: imports nothing
from lra.cli import (archive, bench, check, clean, data, demo, diff, evaluate, listing, plot,
                     pretrain, run, status, sweep, table)
from lra.runs import command

# In the order `lra --help` lists them. Each module's add_parser adds its command(s) and sets
# `handler`, the function that runs it.
COMMANDS = (run, pretrain, check, listing, evaluate, archive, diff, plot, table, status, clean,
            sweep, bench, data)


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="lra", description="Long Range Arena suite. " + demo.HELP,
                                   epilog=command.OVERRIDES_HELP)
  demo.add_options(parser)
  commands = parser.add_subparsers(dest="command", title="commands")
  for module in COMMANDS:
    module.add_parser(commands)
  parser.set_defaults(handler=demo.main)
  return parser


def main(argv: Sequence[str] | None = None) -> int:
  as_command = argv is None  # the `lra` command itself, not a caller passing its arguments
  stop_after.command_started(as_command)  # --stop-after counts from the process's start, or now
  argv, overrides = command.split_overrides(list(sys.argv[1:] if argv is None else argv))
  args = build_parser().parse_args(argv)
  # Orbax logs a failed background save through absl, with its threads' tracebacks; the run
  # reports the failure itself, once, with the fix (checkpoints.CheckpointWriteError).
  logging.getLogger("absl").setLevel(logging.CRITICAL)
  try:
    if args.command is not None:
      demo.refuse_before(args)
    code = args.handler(args, overrides)
    sys.stdout.flush()  # here, so a reader that stopped early (`| head`) is met below
    return code
  except BrokenPipeError:
    return _reader_gone()
  except Exception as e:  # pylint: disable=broad-except
    _exit_if_a_peer_was_lost(e)
    return _report(e, as_command)
  except KeyboardInterrupt:
    print("\nlra: interrupted", file=sys.stderr)
    return 130


def _report(error: Exception, as_command: bool) -> int:
  """A mistake (lra/errors.py: the user's or their machine's) is one line and exit code 2; a bug
  is exit code 1 with its traceback: printed here, or, for a run that failed, in the error.log its
  one line names (train.RunFailed)."""
  train = sys.modules.get("lra.training.train")
  if train and isinstance(error, train.RunFailed):
    print(f"lra: error: {error}", file=sys.stderr)
    return 1
  if not errors.is_mistake(error):
    traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
    print(f"lra: internal error: {type(error).__name__}: {error} (a bug in lra, not a mistake in "
          f"your command: the traceback above says where; please report it with the command)",
          file=sys.stderr)
    return 1
  print(f"lra: error: {error}", file=sys.stderr)
  ckpt = sys.modules.get("lra.runs.checkpoints")
  if as_command and ckpt and isinstance(error, ckpt.CheckpointWriteError):
    _quiet_from_here()
  return 2


def _quiet_from_here() -> None:
  """Nothing more on stderr from this process. After a failed checkpoint write, Orbax's writes
  still in flight can print dozens of tracebacks ("Event loop is closed") from its native threads
  while Python shuts down, under the one line that said what failed and how to resume. Only for
  the `lra` command itself: a caller of main(argv) keeps its stderr."""
  sys.stderr.flush()
  _point_at_devnull(sys.stderr)


def _reader_gone() -> int:
  """stdout's reader closed it (`lra ... | head -3`): stop quietly, as `yes | head` does.

  What is left in stdout's buffer is dropped: pointing stdout at /dev/null lets the interpreter's
  final flush succeed instead of printing a second BrokenPipeError.
  """
  _point_at_devnull(sys.stdout)
  return 128 + 13  # a shell's status for a writer stopped by SIGPIPE (13)


def _point_at_devnull(stream) -> None:
  """What the process writes to `stream`'s file from now on goes nowhere."""
  try:
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, stream.fileno())
    os.close(null)
  except (OSError, ValueError, AttributeError):  # a replaced stream (tests) has no file to repoint
    pass


def _exit_if_a_peer_was_lost(error: Exception) -> None:
  """A multi-host run that lost a process ends here: one line, then an immediate exit.

  Not a normal exit: JAX's exit handler would wait at a shutdown barrier for the lost process
  (minutes), and Orbax threads for saves that can no longer finish.
  """
  if "jax" not in sys.modules:
    return
  from lra.machine import distributed
  lost = distributed.lost_peer(error)
  if lost is None:
    return
  print(f"lra: {lost.hint()}", file=sys.stderr)
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(distributed.EXIT_PEER_LOST)  # pylint: disable=protected-access
