"""A pytest plugin for tools/accelerator_check.py: every test's outcome as one JSON line, written as
it happens, so the names survive a run stopped at its time limit (a report written at the end
would not exist).

  LRA_CHECK_OUTCOMES=tests.jsonl python -m pytest -p check_outcomes ...   (tools/ on PYTHONPATH)

Lines: {"collected": [ids]}, {"start": id}, {"id", "when", "outcome", "message"}. Under xdist the
controller writes them all (workers hand it their reports); the workers write nothing.
"""
from __future__ import annotations

import json
import os

import pytest

ENV = "LRA_CHECK_OUTCOMES"
_worker = False  # an xdist worker of this run (not its controller)


def pytest_configure(config) -> None:
  # xdist gives its workers `workerinput`; the PYTEST_XDIST_WORKER variable would also mark a run
  # started from inside some other pytest's worker (as the tests of this plugin are).
  global _worker  # pylint: disable=global-statement
  _worker = hasattr(config, "workerinput")


def _write(entry: dict) -> None:
  path = os.environ.get(ENV)
  if path and not _worker:
    with open(path, "a") as f:
      f.write(json.dumps(entry) + "\n")


def pytest_collection_finish(session) -> None:
  _write({"collected": [item.nodeid for item in session.items]})


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids) -> None:
  _write({"collected": list(ids)})  # each worker collects the same ids


def pytest_runtest_logstart(nodeid, location) -> None:
  _write({"start": nodeid})


def pytest_runtest_logreport(report) -> None:
  if report.when == "call" or report.outcome != "passed":
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else (
        str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else "")
    _write({"id": report.nodeid, "when": report.when, "outcome": report.outcome,
            "message": message.strip().splitlines()[0][:300] if message.strip() else ""})
