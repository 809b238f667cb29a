"""What `pip install` puts in site-packages: one `lra` namespace, every package, the data files."""
import configparser
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _options():
  parser = configparser.ConfigParser()
  parser.read(ROOT / "setup.cfg")
  package_dir = dict(line.split(" = ") for line in parser["options"]["package_dir"].split("\n")
                     if line.strip())
  packages = [p for p in parser["options"]["packages"].split("\n") if p.strip()]
  return package_dir, packages


def test_every_folder_with_an_init_is_a_declared_package():
  """A new subpackage missing from setup.cfg would be absent from a non-editable install."""
  package_dir, declared = _options()
  found = set()
  for name, folder in package_dir.items():
    for init in (ROOT / folder).rglob("__init__.py"):
      rel = init.parent.relative_to(ROOT / folder).parts
      found.add(".".join((name, *rel)))
  assert found == set(declared)


def test_the_wheel_installs_one_top_level_package(tmp_path):
  """Nothing named models, tasks or configs lands in site-packages beside a user's own."""
  subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w",
                  str(tmp_path)], check=True, capture_output=True)
  (wheel,) = tmp_path.glob("*.whl")
  names = zipfile.ZipFile(wheel).namelist()
  assert {n.split("/")[0] for n in names} == {"lra", wheel.name.split("-")[0] + "-" +
                                             wheel.name.split("-")[1] + ".dist-info"}
  top_level = [n for n in names if n.endswith("top_level.txt")]
  assert not top_level or zipfile.ZipFile(wheel).read(top_level[0]).split() == [b"lra"]
  for expected in ("lra/tasks/sources/listops.py", "lra/models/mixers/latte.py",
                   "lra/configs/listops.py", "lra/reference/published_lra.csv",
                   "lra/report/timings.json"):
    assert expected in names
