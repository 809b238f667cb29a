"""Provenance: which commit a result came from, and whether its code was modified."""
import subprocess

from lra.runs import writers


def test_git_sha_is_dirty_for_code_changes_not_for_results(tmp_path):
  git = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
  git("init", "-q")
  (tmp_path / "code.py").write_text("x = 1\n")
  (tmp_path / "pkg").mkdir()
  (tmp_path / "pkg" / "mod.py").write_text("y = 1\n")
  (tmp_path / "results").mkdir()
  (tmp_path / "results" / "final.json").write_text("{}\n")
  git("add", ".")
  git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
  sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True,
                       text=True, check=True).stdout.strip()
  assert writers.git_sha(tmp_path) == sha
  (tmp_path / "results" / "final.json").unlink()  # a run replacing results: still clean code
  assert writers.git_sha(tmp_path) == sha
  (tmp_path / "code.py").write_text("x = 2\n")
  assert writers.git_sha(tmp_path) == sha + "-dirty"
  # Asked from inside a package (as git_sha does by default), code elsewhere still counts.
  assert writers.git_sha(tmp_path / "pkg") == sha + "-dirty"
