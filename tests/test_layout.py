"""lra/'s rooms and the one direction of their imports (lra/__init__.py draws the map).

Every import counts, those inside functions too (a deferred import is still a dependency): a
module may import its own room and the rooms below it, never one above, and no set of modules
may import each other in a circle.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Lowest first. tasks, models and configs (installed as lra.tasks, ...) sit with errors.py and
# base/ at the bottom: they import lra.errors and lra.base and nothing else of lra.
LAYERS = ("errors", "base", "machine", "runs", "training", "run", "report", "bench", "cli")
ROOMS = ("base", "machine", "runs", "training", "report", "bench", "cli")
LEAVES = ("tasks", "models", "configs", "reference")


def _modules() -> dict[str, Path]:
  found = {}
  for path in sorted((ROOT / "lra").rglob("*.py")):
    parts = path.relative_to(ROOT).with_suffix("").parts
    found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
  return found


def _imports(path: Path, name: str) -> set[str]:
  """The lra modules `path` imports, at any depth of its code."""
  found = set()
  package = name if path.name == "__init__.py" else name.rpartition(".")[0]
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      found |= {a.name for a in node.names if a.name.split(".")[0] == "lra"}
    elif isinstance(node, ast.ImportFrom):
      module = node.module or ""
      if node.level:
        module = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                          + ([module] if module else []))
      if module.split(".")[0] != "lra":
        continue
      # `from lra.runs import pack` imports the module lra.runs.pack; `from lra.runs.pack import
      # unpack` the module lra.runs.pack.
      names = {f"{module}.{a.name}" for a in node.names}
      found |= (names & set(MODULE_NAMES)) or {module}
  return found


MODULE_NAMES: list[str] = []


def _room(module: str) -> str:
  parts = module.split(".")
  return parts[1] if len(parts) > 1 else "lra"


MODULES = _modules()
MODULE_NAMES.extend(MODULES)
GRAPH = {name: {m for m in _imports(path, name) if m in MODULES and m != name}
         for name, path in MODULES.items()}


def test_every_room_has_a_docstring_saying_what_it_holds_and_may_import():
  for room in ROOMS:
    doc = ast.get_docstring(ast.parse((ROOT / "lra" / room / "__init__.py").read_text())) or ""
    assert 2 <= len(doc.splitlines()) <= 4 and "import" in doc, room
  top = ast.get_docstring(ast.parse((ROOT / "lra" / "__init__.py").read_text()))
  assert all(f"{room}/" in top for room in ROOMS)


def test_lra_holds_only_its_rooms_and_three_modules():
  loose = sorted(p.name for p in (ROOT / "lra").glob("*.py"))
  assert loose == ["__init__.py", "__main__.py", "errors.py", "run.py"]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_go_down_only(name):
  room = _room(name)
  if room in ("__init__", "__main__", "lra", *LEAVES):
    return
  level = LAYERS.index(room)
  for imported in GRAPH[name]:
    other = _room(imported)
    if other in LEAVES or other == "lra":
      continue
    assert LAYERS.index(other) <= level, f"{name} imports {imported}: {other} is above {room}"


def _allowed(room: str) -> set[str] | None:
  """The rooms (and lra.run, lra.errors) a room's docstring says it may import: its
  `lra.<name>` words ("May import: lra.runs, lra.machine, ..."); None for cli (any)."""
  import re
  doc = ast.get_docstring(ast.parse((ROOT / "lra" / room / "__init__.py").read_text())) or ""
  says = doc[doc.index("May import"):]
  if room == "cli":
    return None
  return set(re.findall(r"\blra\.(\w+)", says))


@pytest.mark.parametrize("room", ROOMS)
def test_each_room_imports_only_what_its_docstring_allows(room):
  allowed = _allowed(room)
  if allowed is None:
    return
  for name in (m for m in MODULES if _room(m) == room):
    for imported in GRAPH[name]:
      other = _room(imported)
      target = "run" if imported == "lra.run" else other
      assert target in allowed | {room, *LEAVES} or other == "lra", (
          f"{name} imports {imported}, which lra/{room}/__init__.py does not allow")


def test_tasks_models_and_configs_import_only_errors_and_base_of_the_runner():
  for folder in ("tasks", "models", "configs"):
    for path in (ROOT / folder).rglob("*.py"):
      for imported in _imports(path, "lra." + folder):
        first = imported.split(".")[1] if "." in imported else ""
        assert first in (*LEAVES, "errors", "base"), f"{path.relative_to(ROOT)} imports {imported}"


def test_no_import_circles():
  state: dict[str, int] = {}  # 1: on the current path, 2: done
  def visit(name: str, path: list[str]) -> None:
    state[name] = 1
    for other in sorted(GRAPH[name]):
      if state.get(other) == 1:
        circle = path[path.index(other):] + [other] if other in path else [name, other]
        pytest.fail("import circle: " + " -> ".join(circle))
      if not state.get(other):
        visit(other, [*path, other])
    state[name] = 2
  for name in sorted(GRAPH):
    if not state.get(name):
      visit(name, [name])


def test_committed_runs_resume_under_the_moved_modules():
  """Every committed run folder is the run its resume command makes (the command `lra unpack`
  prints): `lra run` would resume it, not refuse it as another run. The regrouping moved code,
  not what a run is."""
  from lra.models.mixers import MIXERS
  from lra.runs import run_identity, start
  from lra.runs.command import run_config
  from lra.runs.config_loading import reference_config
  from lra.runs.pack import resume_command
  folders = sorted(p.parent for p in (ROOT / "results" / "runs").glob("*/*/*/config.json"))
  assert len(folders) >= 20
  for folder in folders:
    stored = json.loads((folder / "config.json").read_text())
    words = shlex.split(resume_command(stored, folder))[1:]
    config = run_config(words).to_dict()
    # A fine-tune's start as the command records it, against the one the folder's run recorded
    # (from before the record: its final.json's, as read then).
    recorded, _ = start.read_run(folder, base=ROOT)
    reasons = run_identity.same_run(recorded, config, reference_config(config).to_dict())
    assert not reasons, f"{folder.relative_to(ROOT)}: {reasons}"
    # A key of the mixer's block that the stored config lacks ran as the class's default then
    # (the block is bound to the class), unless the key is listed with the value the code had
    # before it (run_identity.ADDED_KEYS): the resumed run must build that, not today's preset
    # value. (same_run reads both sides through run_identity, so it cannot see this alone.)
    mixer = stored["model"]["mixer"]
    if mixer in MIXERS:
      defaults = {f.name: f.default for f in dataclasses.fields(MIXERS[mixer])
                  if f.default is not dataclasses.MISSING}
      trained = run_identity.as_trained(stored)["mixers"][mixer]
      defaults.update({key.split(".")[2]: trained[key.split(".")[2]]
                       for key in run_identity.ADDED_KEYS if key.startswith(f"mixers.{mixer}.")})
      for key in config["mixers"][mixer].keys() - stored["mixers"][mixer].keys():
        assert config["mixers"][mixer][key] == defaults[key], (
            f"{folder.relative_to(ROOT)}: mixers.{mixer}.{key} resumes as "
            f"{config['mixers'][mixer][key]!r}, but it trained {defaults[key]!r}")
