"""Ctrl-C and SIGTERM (a scheduler's preemption) as a request to stop at the next step boundary,
so the train loop can save a checkpoint and write final.json before it exits.
"""
from __future__ import annotations

import signal
import threading


class StopRequest:
  """While active, SIGINT/SIGTERM set `requested` instead of killing; a second Ctrl-C raises.

  Handlers can only be installed from the main thread; elsewhere signals keep their defaults.
  """

  def __init__(self):
    self.requested = False
    self.signal_name = ""
    self._previous: dict = {}

  def __enter__(self) -> StopRequest:
    if threading.current_thread() is threading.main_thread():
      for sig in (signal.SIGINT, signal.SIGTERM):
        self._previous[sig] = signal.signal(sig, self._handle)
    return self

  def _handle(self, signum, frame) -> None:
    if self.requested and signum == signal.SIGINT:
      raise KeyboardInterrupt  # the user insists: stop now, without saving
    self.requested = True
    self.signal_name = signal.Signals(signum).name

  def __exit__(self, *exc) -> None:
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
    self._previous = {}
