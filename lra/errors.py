"""Mistakes, not bugs: the errors a user or their machine caused, which `lra` reports in one line.

A user's mistake (a bad name, a missing file, a damaged archive) or their machine's (a full disk,
a lost host) is one `lra: error:` line with the fix and exit code 2; anything else is a bug in the
suite, and `lra` keeps its traceback (lra/cli/entry.py:main,
docs/troubleshooting.md#mistakes-and-bugs).

The one module of `lra/` that `lra.tasks`, `lra.models` and `lra.configs` import, because each of
them refuses a user's input: it imports nothing, so the layers above it stay one-directional.
Each type below is also the builtin a caller already catches (`except ValueError` still catches a
BadValue), so raising one instead of the builtin changes no caller.
"""
from __future__ import annotations


class UserError(Exception):
  """What a user or their machine did wrong; str() is the one line: what was expected, what was
  found, and the command or setting that fixes it."""


class BadValue(UserError, ValueError):
  """A setting, argument or file's content that is not what is expected."""


class UnknownName(UserError, KeyError):
  """A name that is not among the valid ones (task, mixer, preset, config key, split)."""

  def __str__(self) -> str:  # KeyError's own quotes the message as if it were a key
    return str(self.args[0]) if self.args else ""


class NotFound(UserError, FileNotFoundError):
  """A path, run folder, archive or prepared data that is not there."""


class Conflict(UserError, FileExistsError):
  """A place already taken by something else (another run's files, another process)."""


class MissingPackage(UserError, ImportError):
  """An optional package a setting needs is not installed; the message is the install command."""


def is_mistake(error: BaseException) -> bool:
  """True for a user's or their machine's error (one line, exit 2); False for a bug (traceback).

  An OSError that carries an errno is the operating system's refusal (a full disk, no permission,
  no such file, a lost connection): its message names the path, and the fix is on the user's side.
  """
  if isinstance(error, UserError):
    return True
  return isinstance(error, OSError) and error.errno is not None
