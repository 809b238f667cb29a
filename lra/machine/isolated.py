"""A function's call with XLA's own log captured, in this process or a fresh one with a time limit,
and whether its failure was memory running out. Used by `lra bench` and tools/accelerator_check.py.

XLA writes its log (the GPU autotuner's included) from C++ straight to file descriptor 2, so only
redirecting that descriptor keeps it out of the terminal; this module imports no JAX, so a fresh
process pays for JAX only if its function needs it.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Lines that say memory ran out: XLA's allocator (RESOURCE_EXHAUSTED), CUDA, cuDNN and cuBLAS
# (..._ALLOC_FAILED), and the GPU autotuner, which fails as INTERNAL and logs the cause.
OOM_MARKS = ("resource_exhausted", "out of memory", "out_of_memory", "failed to allocate",
             "alloc_failed")


def out_of_memory(*texts: str) -> str | None:
  """The first line of `texts` (an error, then XLA's log) saying that memory ran out, or None."""
  for text in texts:
    for line in text.splitlines():
      if any(mark in line.lower() for mark in OOM_MARKS):
        return line.strip()[:200]
  return None


def call_logged(fn: Callable[..., Any], kwargs: dict[str, Any], xla_log: Path | None,
                label: str) -> tuple[Any, str | None, str | None]:
  """`fn(**kwargs)` with file descriptor 2 (where XLA's C++ log goes) captured, then appended to
  `xla_log` under a `==== label ====` line (dropped when None).

  Returns:
    (result, None, None) on success; (None, error, oom line or None) when fn raised.
  """
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile() as capture:
    os.dup2(capture.fileno(), 2)
    try:
      result, error = fn(**kwargs), None
    except Exception as e:  # noqa: BLE001 - the caller makes a record of it
      result, error = None, f"{type(e).__name__}: {e}"
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
    capture.seek(0)
    text = capture.read().decode(errors="replace")
  if xla_log is not None:
    with open(xla_log, "a") as f:
      f.write(f"==== {label} ====\n{text}" + (f"{error}\n" if error else ""))
  if error is None:
    return result, None, None
  return None, error, out_of_memory(error, text)


def _child(send, fn, kwargs, xla_log, label) -> None:
  send.send(call_logged(fn, kwargs, xla_log, label))
  # What XLA writes while the process shuts down stays out of the terminal too.
  os.dup2(os.open(xla_log or os.devnull, os.O_WRONLY | os.O_APPEND | os.O_CREAT), 2)


def call_isolated(fn: Callable[..., Any], kwargs: dict[str, Any], *, xla_log: Path | None = None,
                  label: str = "", timeout_s: float | None = None
                  ) -> tuple[Any, str | None, str | None]:
  """call_logged in a fresh (spawned) process, stopped after `timeout_s` seconds.

  A fresh process starts from an empty accelerator: in one process the allocator fragments, and
  a record after a large one can fail that would run alone. `fn` must be importable by name.

  Returns:
    As call_logged; a process stopped at `timeout_s` gives (None, "timeout: ...", None), one
    killed by SIGKILL from elsewhere (None, "killed", the out-of-memory line), one that died
    otherwise (None, "the process died ...", None).
  """
  context = multiprocessing.get_context("spawn")
  receive, send = context.Pipe(duplex=False)
  process = context.Process(target=_child, args=(send, fn, kwargs, xla_log, label), daemon=True)
  process.start()
  send.close()
  outcome, timed_out = None, False
  try:
    if receive.poll(timeout_s):
      outcome = receive.recv()
    else:
      timed_out = True
  except EOFError:  # the process ended without an answer
    pass
  except BaseException:  # Ctrl-C here: the record is abandoned, not left running
    process.kill()
    raise
  finally:
    receive.close()
    if timed_out:
      process.kill()
    process.join()
  if outcome is not None:
    return outcome
  if timed_out:
    return None, f"timeout: stopped after {timeout_s:.0f} s", None
  code = process.exitcode
  if code == -signal.SIGKILL:  # not ours: on Linux, the kernel's out-of-memory killer
    return None, "killed", "killed by SIGKILL (most likely the host's out-of-memory killer)"
  how = f"of {signal.Signals(-code).name}" if code < 0 else f"with exit code {code}"
  return None, f"the process died {how}", None
