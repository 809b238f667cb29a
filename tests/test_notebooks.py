"""The notebooks run top to bottom, headless, on the committed results, and are stored clean."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_notebooks_exist():
  assert {p.name for p in NOTEBOOKS} >= {"curves.ipynb", "tables.ipynb"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_cleared_in_git(path):
  notebook = json.loads(path.read_text())
  for cell in notebook["cells"]:
    if cell["cell_type"] == "code":
      assert cell["outputs"] == [] and cell["execution_count"] is None, (
          f"{path.name} has outputs; clear them (Jupyter: Edit > Clear All Outputs, or "
          "`jupyter nbconvert --clear-output --inplace notebooks/*.ipynb`)")


@pytest.fixture
def kernel_env(tmp_path, monkeypatch):
  """A kernelspec for this interpreter in a tmp dir, so no user or system install is needed."""
  spec = tmp_path / "jupyter" / "kernels" / "lra-test"
  spec.mkdir(parents=True)
  (spec / "kernel.json").write_text(json.dumps({
      "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
      "display_name": "lra tests", "language": "python"}))
  monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
  monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline backend renders via Agg
  return "lra-test"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(path, kernel_env):
  import nbclient  # dev extras; a missing one must fail CI, not skip the notebooks
  import nbformat
  notebook = nbformat.read(path, as_version=4)
  client = nbclient.NotebookClient(notebook, kernel_name=kernel_env, timeout=120,
                                   resources={"metadata": {"path": str(path.parent)}})
  client.execute()  # raises CellExecutionError naming the failing cell
  outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
  assert not [o for o in outputs if o.output_type == "error"]
  text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
  assert "complete runs in" in text
  assert any("image/png" in o.get("data", {}) for o in outputs), "no figure was drawn"
