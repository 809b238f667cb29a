"""The linter in CI: `ruff check` finds nothing in the code folders under the rules that
pyproject.toml's [tool.ruff] chooses (the dev extra installs the lock's ruff)."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("lra", "tasks", "models", "configs", "tools", "tests")


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None,
                    reason="ruff is not installed: pip install -c requirements-lock.txt -e "
                           "\".[dev]\" installs the lock's")
def test_ruff_finds_nothing():
  done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache",
                         "--output-format", "concise", *FOLDERS],
                        cwd=ROOT, capture_output=True, text=True)
  assert done.returncode == 0, done.stdout + done.stderr
