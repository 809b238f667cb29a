"""The README and docs/ as a reader meets them: every link and cited section exists, the generated
blocks match what regenerating them gives, the README fits on a page, the stated Python version is
the one the lock needs, and the code and commands the pages show run."""
import importlib.metadata
import json
import math
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from lra.bench import step_time
from lra.report import table_status, tables

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The study reports beside their run folders (results/<study>/README.md), linked from the docs.
REPORTS = sorted([*(ROOT / "results").glob("*/README.md"),
                  *(ROOT / "results" / "runs").glob("*/README.md")])
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


@pytest.mark.parametrize("page", PAGES + REPORTS, ids=lambda p: p.relative_to(ROOT).as_posix())
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
  sources = PAGES + REPORTS + [p for folder in ("lra", "tasks", "models", "configs", "tests",
                                                "tools") for p in (ROOT / folder).rglob("*.py")]
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
  start, end = (text.index(m) for m in step_time.README_MARKERS)
  records = json.loads((ROOT / "results" / "bench" / "cpu.json").read_text())
  sha = re.search(r"git ([0-9a-f]{40}(?:-dirty)?)",  # -dirty: measured with uncommitted edits
                  (ROOT / "results" / "bench" / "cpu.md").read_text())[1]
  expected = step_time.readme_block(records, Path("../results/bench/cpu.md"), sha)
  assert text[start:end + len(step_time.README_MARKERS[1])] == expected
  assert f"git {sha}" in expected
  assert step_time.README_MARKERS[0] not in readme  # one copy of the figures, in docs/


def test_the_status_is_generated_and_its_prose_holds_no_run_figure():
  """The README's short status and docs/status.md's figures are blocks `lra table --committed`
  writes (so the check above covers them: it skips a page without its markers, hence the markers
  are asserted here); the hand-written prose around docs/status.md's block types no accuracy,
  duration or speed, which could drift from the run folders."""
  readme = (ROOT / "README.md").read_text()
  page = (ROOT / table_status.PAGE).read_text()
  assert all(marker in readme for marker in table_status.README_MARKERS)
  assert all(marker in page for marker in table_status.PAGE_MARKERS)
  start, end = (page.index(m) for m in table_status.PAGE_MARKERS)
  block, prose = page[start:end], page[:start] + page[end:]
  assert "% test at the best validation step" in block  # the figures are in the block
  figures = re.findall(r"\d+\.\d+ ?%|\d+ ?min\b|\d+h\d\d|\d+(?:\.\d+)? ?steps/s|\d+(?:\.\d+)? h\b",
                       prose)
  assert not figures, f"docs/status.md types run figures outside its generated block: {figures}"


def test_every_time_the_pages_and_the_cli_quote_is_the_measured_records(capsys):
  """Issue 80: the demo's time was ~2.5 min in the README, 4-4.5 min in `lra list` and about 5
  minutes in `--help`. Every such time is now one claim of lra/report/timings.json (made from
  the committed measurements by `lra table --committed`; the check above fails when it is stale),
  and each place the record names quotes the claim's text as it stands there."""
  from lra.cli import demo, listing, main
  from lra.report import timings
  record = json.loads(timings.RECORD.read_text())
  with pytest.raises(SystemExit):
    main(["check", "--help"])
  cli = {"lra --help": demo.HELP, "lra list": "\n".join(listing.PRESET_DESCRIPTIONS.values()),
         "lra check --help": capsys.readouterr().out}
  squeeze = lambda s: "".join(s.split())  # noqa: E731 (help text is wrapped, at hyphens too)
  missing = [f"{name} in {place}" for name, claim in record["claims"].items()
             for place in claim["quoted_in"]
             if squeeze(claim["text"]) not in squeeze(cli.get(place) or (ROOT / place).read_text())]
  assert not missing, f"quote the measured record's text (lra.report.timings.text): {missing}"
  assert all(claim["measured"] and claim["text"].endswith("(measured)")
             for claim in record["claims"].values())


def test_the_readme_fits_on_a_page():
  """The front page stays short (issue 59): depth goes to docs/, linked from it."""
  lines = (ROOT / "README.md").read_text().splitlines()
  assert len(lines) <= 170, f"README.md has {len(lines)} lines; move detail to docs/"


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


def test_the_library_pages_code_example_runs(tmp_path, monkeypatch):
  """docs/library.md "Use the pieces in your own code": a mixer alone, then a training loop of
  one's own."""
  section = (ROOT / "docs" / "library.md").read_text().split(
      "## Use the pieces in your own code", 1)[1]
  code = section.split("```python\n", 1)[1].split("```", 1)[0]
  monkeypatch.setenv("LRA_DATA_DIR", str(tmp_path))
  namespace: dict = {}
  exec(compile(code, "docs/library.md example", "exec"), namespace)  # pylint: disable=exec-used
  assert namespace["y"].shape == namespace["x"].shape
  assert math.isfinite(float(namespace["loss"]))
  assert namespace["step"] == 9  # the loop ran to the end


def _readme_section(title: str) -> str:
  return (ROOT / "README.md").read_text().split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _commands(block: str) -> list[list[str]]:
  """A bash block's commands as argument lists (comments dropped, `\\` continuations joined)."""
  return [shlex.split(line, comments=True)
          for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def test_the_readmes_own_layer_steps_run_from_a_folder_of_ones_own(tmp_path, monkeypatch, capsys):
  """README "Test your own layer", in a fresh folder outside the repository: the layer file as
  printed, then every command of the block from that folder. `lra check` and `lra table` run as
  written (the screen's runs stood in for: tests/test_screen.py runs a tiny one); the hour-long
  laptop run and the squares run run as dry runs."""
  from lra.bench import screen
  from lra.cli import main
  section = _readme_section("Test your own layer")
  code = section.split("```python\n", 1)[1].split("```", 1)[0]
  layer = code.splitlines()[0].lstrip("# ").split(",")[0]  # "# my_layers/mean_gate.py, in ..."
  (tmp_path / layer).parent.mkdir(parents=True)
  (tmp_path / layer).write_text(code)
  monkeypatch.chdir(tmp_path)
  monkeypatch.setenv("LRA_DATA_DIR", str(tmp_path / "data"))
  commands = _commands(section.split("```bash\n", 1)[1].split("```", 1)[0])
  assert [c[:3] for c in commands] == [["lra", "check", "my_layers/mean_gate.py:MeanGate"],
                                       ["lra", "check", "my_layers/mean_gate.py:MeanGate"],
                                       ["lra", "run", "listops"], ["lra", "run", "pathfinder"],
                                       ["lra", "table"]]
  assert commands[1][3:] == ["--screen"] and commands[3][-2:] == ["--preset", "squares"]
  ran = []
  monkeypatch.setattr(screen, "probe", lambda mixer, **kw: ran.append(mixer) or [])
  monkeypatch.setattr(screen, "screen", lambda mixer, **kw: [
      screen.Score("mix", 0.0625, 0.0625, 1.0, 1.0, 1.0), screen.Score("learn", 0.5, 0.5, 1.0,
                                                                       1.0, 1.0)])
  fast = {"listops": ["--dry-run"], "pathfinder": ["--dry-run"]}
  for command in commands:
    argv = command[1:] + (fast[command[2]] if command[1] == "run" else [])
    assert main(argv) == (1 if "--screen" in argv else 0), command
    out = capsys.readouterr().out
    if command[1] == "check":
      assert out.strip().splitlines()[-1].startswith(
          "lra check: my_layers/mean_gate.py:MeanGate meets the mixer contract")
    if command[2:3] == ["pathfinder"]:  # the squares run's own folder, beside the committed ones
      assert "runs/pathfinder/MeanGate@" in out and "/squares_seed0" in out
  assert ran == ["my_layers/mean_gate.py:MeanGate"]
  lra_md = (tmp_path / "results/local/tables/lra.md").read_text()
  assert "| latte (committed) | ListOps | laptop |" in lra_md
  assert "| Pathfinder, 4x4 squares |" in lra_md  # the committed squares column a row joins


def test_the_readmes_cluster_example_runs_from_the_sweep_to_the_table(tmp_path, monkeypatch,
                                                                      capsys):
  """README "On a GPU or a cluster (Slurm)", as written, in a fresh folder: the `lra sweep` line
  emits a valid bash script with the time limit, the environment and the shared data; `sbatch
  --wait` (not run here: no Slurm) blocks until the array has ended, and the `lra` commands after
  it run and write the tables."""
  from lra.cli import main
  from lra.cli.slurm import current_env_activate
  monkeypatch.chdir(tmp_path)
  section = _readme_section("On a GPU or a cluster (Slurm)")
  sweep_line, submit, *after = _commands(section.split("```bash\n", 1)[1].split("```", 1)[0])
  assert sweep_line[:2] == ["lra", "sweep"] and submit[:2] == ["sbatch", "--wait"]
  assert [c[:2] for c in after] == [["lra", "status"], ["lra", "table"]]
  assert main(sweep_line[1:]) == 0
  err = capsys.readouterr().err.splitlines()
  data_dir = sweep_line[sweep_line.index("--data-dir") + 1]
  missing = [line for line in err if "would stop at once" in line]
  assert len(missing) == 6 and all(f"no prepared data at {data_dir}/listops" in line
                                   for line in missing)  # one line per run, none prepared
  script = tmp_path / submit[-1]
  assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
  text = script.read_text()
  time = sweep_line[sweep_line.index("--time") + 1]
  assert f"#SBATCH --time={time}\n" in text and "#SBATCH --gres=gpu:1\n" in text
  commands = [line for line in text.splitlines() if "-m lra run" in line]
  assert len(commands) == 6 and all(f"--data-dir {data_dir} " in c for c in commands)
  env = current_env_activate()
  assert (f"\nsource {env}\nset -euo pipefail" if env else "No environment to activate") in text
  for command in after:
    assert main(command[1:]) == 0, command
  assert "| latte (committed) | ListOps | laptop |" in (
      tmp_path / "results/local/tables/lra.md").read_text()


def test_the_readmes_self_pretraining_commands_run_as_written(tmp_path, monkeypatch, capsys):
  """README "Self-pretraining": the two commands as printed (as dry runs: 20,000 steps are for a
  CPU's afternoon, not a test), the fine-tune's --init-from naming the folder the pretraining
  run goes to."""
  from lra.cli import main
  monkeypatch.chdir(tmp_path)
  section = _readme_section("Self-pretraining")
  pretrain, tune = _commands(section.split("```bash\n", 1)[1].split("```", 1)[0])
  assert pretrain[:2] == ["lra", "pretrain"] and tune[:2] == ["lra", "run"]
  assert main([*pretrain[1:], "--dry-run"]) == 0
  out = capsys.readouterr().out
  folder = tune[tune.index("--init-from") + 1]
  assert f"run folder: {folder} (new)" in out and "then its fine-tune" in out
  assert main([*tune[1:], "--dry-run"]) == 0
  assert f"starts from: the pretraining run {folder}" in capsys.readouterr().out


def test_the_readmes_screen_bars_and_reversals_are_the_codes_and_the_records():
  """The README's line on the screen states the bars the code applies and the second seed's
  reversals as the committed records count them (results/screen/screen.json)."""
  from lra.bench import screen
  section = " ".join(_readme_section("Test your own layer").split())
  assert f"test >= {100 * screen.MIX.bar:.0f}%" in section
  assert f"train >= {100 * screen.LEARN.bar:.0f}%" in section
  flipped, pairs, _ = screen.reversals(screen.load_records())["verdict"]
  assert f"reversed {flipped} of {pairs} verdicts" in section


def test_the_s5_screens_table_is_the_records():
  """docs/mixers.md types no screen figure: its table is made from results/s5_diagnosis/
  screens.json (`python tools/s5_diagnosis.py --docs`)."""
  sys.path.insert(0, str(ROOT / "tools"))
  import s5_diagnosis  # pylint: disable=import-outside-toplevel
  records = json.loads((ROOT / "results" / "s5_diagnosis" / "screens.json").read_text())
  assert (ROOT / "docs" / "mixers.md").read_text() == s5_diagnosis.docs_text(records)


def test_the_spt_tables_are_the_run_folders():
  """The SPT pilot's report (results/spt/README.md) types no figure of the SPT runs: the pilot's
  table and the pairs beyond squares are made from the run folders (`python
  tools/spt_summary.py`)."""
  sys.path.insert(0, str(ROOT / "tools"))
  import spt_summary  # pylint: disable=import-outside-toplevel
  runs = spt_summary.table_runs()
  assert (ROOT / "results" / "spt" / "README.md").read_text() == spt_summary.docs_text(runs)
