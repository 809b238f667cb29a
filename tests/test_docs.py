"""The README and docs/ as a reader meets them: every link and cited section exists, the generated
blocks match what regenerating them gives, the stated Python version is the one the lock needs, and
the README's code example runs."""
import importlib.metadata
import json
import math
import re
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from lra import bench, tables

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# `docs/runs.md, "Run folders"`, `protocol.md "The rule"`, or README and a section name.
CITED = re.compile(r"\b(README|(?:docs/)?[\w-]+\.md),? \"([^\"]+)\"")


def _anchor(heading: str) -> str:
  """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
  return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings(page: Path) -> list[str]:
  text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # no headings inside code
  return [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]


def _page(name: str, near: Path) -> Path:
  if name == "README":
    return ROOT / "README.md"
  return (ROOT / name) if name.startswith("docs/") else near.parent / name


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_and_anchor_exists(page):
  missing = []
  for target in LINK.findall(page.read_text()):
    if re.match(r"[a-z]+:", target):
      continue  # a web address: not checked offline
    path, _, anchor = target.partition("#")
    file = (page.parent / path).resolve() if path else page
    if not file.exists():
      missing.append(target)
    elif anchor and anchor not in [_anchor(h) for h in _headings(file)]:
      missing.append(f"{target} (no such heading)")
  assert not missing, f"{page.name}: broken links {missing}"


def test_every_cited_section_exists():
  """A section named in prose or a docstring (`docs/runs.md, "Run folders"`) is a heading there."""
  sources = PAGES + [p for folder in ("lra", "tasks", "models", "configs", "tests", "tools")
                     for p in (ROOT / folder).rglob("*.py")]
  missing = []
  for source in sources:
    for name, section in CITED.findall(source.read_text()):
      page = _page(name, source)
      if page.exists() and section not in _headings(page):
        missing.append(f"{source.relative_to(ROOT)}: {name} \"{section}\"")
  assert not missing, f"cited sections that do not exist: {missing}"


def test_the_readme_links_every_docs_page():
  readme = (ROOT / "README.md").read_text()
  unlinked = [p.name for p in PAGES[1:] if f"(docs/{p.name})" not in readme]
  assert not unlinked, f"README's documentation map lacks {unlinked}"


def test_generated_blocks_say_their_commit_and_are_current():
  """Stale = the block differs from what regenerating it from the committed inputs gives, apart
  from the commit it names (the table block: the committed runs, `lra table --committed`; the
  bench block: the committed records of results/bench/cpu.json, `lra bench ... --readme`)."""
  assert tables.check(ROOT / "results", ROOT / "README.md") == []
  readme = (ROOT / "README.md").read_text()
  assert tables.MADE_AT.search(readme[readme.index(tables.README_START):])
  page = ROOT / "docs" / "performance.md"
  text = page.read_text()
  start, end = (text.index(m) for m in bench.README_MARKERS)
  records = json.loads((ROOT / "results" / "bench" / "cpu.json").read_text())
  sha = re.search(r"git ([0-9a-f]{40}(?:-dirty)?)",  # -dirty: measured with uncommitted edits
                  (ROOT / "results" / "bench" / "cpu.md").read_text())[1]
  expected = bench.readme_block(records, Path("../results/bench/cpu.md"), sha)
  assert text[start:end + len(bench.README_MARKERS[1])] == expected
  assert f"git {sha}" in expected
  assert bench.README_MARKERS[0] not in readme  # one copy of the figures, in docs/


def test_python_version_is_the_one_the_lock_needs():
  """setup.cfg, the README and the lock agree: the oldest Python allowed runs every pinned
  version (as installed here), and some pin needs it, so the floor is not lower than true."""
  setup = (ROOT / "setup.cfg").read_text()
  floor = re.search(r"^python_requires = >=(\d+\.\d+)$", setup, re.M)[1]
  assert f"Python {floor} or newer" in (ROOT / "README.md").read_text()
  assert f"Python >={floor}" in (ROOT / "requirements-lock.txt").read_text()
  below = Version(floor).release[0], Version(floor).release[1] - 1
  needs_floor, rejects = [], []
  for line in (ROOT / "requirements-lock.txt").read_text().splitlines():
    if not line.strip() or line.startswith("#"):
      continue
    name, version = line.split("==")
    try:
      dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
      continue
    requires = dist.metadata.get("Requires-Python")
    if dist.version != version or not requires:
      continue
    spec = SpecifierSet(requires)
    if not spec.contains(f"{floor}.0"):
      rejects.append(f"{name}=={version} ({requires})")
    if not spec.contains(f"{below[0]}.{below[1]}.99"):
      needs_floor.append(name)
  assert not rejects, f"pins that do not run on Python {floor}: {rejects}"
  assert needs_floor, f"no pin needs Python {floor}: the floor could be lower"


def test_license_and_citation():
  assert (ROOT / "LICENSE").read_text().split()[:4] == ["Apache", "License", "Version", "2.0,"]
  assert "license = Apache-2.0" in (ROOT / "setup.cfg").read_text()
  citation = (ROOT / "CITATION.cff").read_text()
  for title in ("Long Range Arena: A Benchmark for Efficient Transformers",
                "Latte: Latent Attention for Linear Time Transformers"):
    assert title in citation


def test_the_readmes_own_code_example_runs(tmp_path, monkeypatch):
  """README "Use the pieces in your own code": a mixer alone, then a training loop of one's own."""
  section = (ROOT / "README.md").read_text().split("## Use the pieces in your own code", 1)[1]
  code = section.split("```python\n", 1)[1].split("```", 1)[0]
  monkeypatch.setenv("LRA_DATA_DIR", str(tmp_path))
  namespace: dict = {}
  exec(compile(code, "README example", "exec"), namespace)  # pylint: disable=exec-used
  assert namespace["y"].shape == namespace["x"].shape
  assert math.isfinite(float(namespace["loss"]))
  assert namespace["step"] == 9  # the loop ran to the end
