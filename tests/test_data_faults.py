"""Faults injected into prepared caches and the folders that make them: each one ends in a one-line
error that names the file and the fix, or in the right cache, never in a half-written folder.

Deaths at exact points use RLIMIT_FSIZE with SIGXFSZ left at the kernel's default: the process is
killed by a signal the moment a write crosses the limit, with no Python cleanup, as under kill -9.
The window between the two renames of a swap is reached by leaving the state a death there leaves.
"""
import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from lra.runs.config_loading import load_data, resolve_config
from lra.cli import main
from lra.tasks.contract import atomic, integrity
from lra.tasks.contract.cache import CacheDamagedError, DataMissingError, PreparedData
from lra.tasks.generators import listops as listops_generator
from lra.tasks.generators import synthetic

SMALL = dict(num_train=40, num_val=8, num_test=8, seq_len=32, min_length=4, seed=1)


def _synthetic(cache, **settings):
  return synthetic.prepare(cache.parent / "no_source", cache, **{**SMALL, **settings})


def _arrays(cache):
  data = PreparedData(cache)
  return {f"{s}.{k}": np.asarray(v) for s in ("train", "val", "test")
          for k, v in data.split(s).items()}


def _same_cache(a, b):
  left, right = _arrays(a), _arrays(b)
  assert left.keys() == right.keys()
  for key in left:
    np.testing.assert_array_equal(left[key], right[key])
  strip = lambda meta: {k: v for k, v in meta.items() if k != "source"}
  assert strip(PreparedData(a).meta) == strip(PreparedData(b).meta)


def _leftovers(folder):
  return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name or ".old-" in p.name)


def _dead_pid():
  child = subprocess.Popen([sys.executable, "-c", "pass"])
  child.wait()
  return child.pid


def _owner(pid):
  return f"{pid}@{atomic.socket.gethostname()}"


def _die_when_a_file_exceeds(limit, code, imports="from lra.tasks.generators import synthetic"):
  """Runs code in a child that the kernel kills (SIGXFSZ) at its first write past `limit` bytes."""
  script = textwrap.dedent(f"""
      import resource, signal
      {imports}
      resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
      resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
      signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it; the default kills
      {code}
  """)
  return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                        timeout=120, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


# --- A damaged cache: one line naming the file and the command, and prepare rebuilds it ---------

def _flip_sampled_byte(path):
  with open(path, "r+b") as f:  # the last byte is always in a sampled block
    f.seek(-1, os.SEEK_END)
    last = f.read(1)
    f.seek(-1, os.SEEK_END)
    f.write(bytes([last[0] ^ 0xFF]))


def _reshape(path):
  array = np.load(path)
  np.save(path, array.reshape(array.shape[0] * 2, -1))  # same bytes, another shape


FAULTS = {
    "truncated": ("train.inputs.npy", lambda p: os.truncate(p, p.stat().st_size // 2)),
    "deleted": ("val.label.npy", lambda p: p.unlink()),
    "overwritten": ("test.inputs.npy", _flip_sampled_byte),
    "reshaped": ("train.inputs.npy", _reshape),
    "meta.json cut": ("meta.json", lambda p: p.write_text(p.read_text()[:200])),
    "meta.json arrays": ("meta.json", lambda p: p.write_text(json.dumps(
        {**json.loads(p.read_text()), "arrays": {}}))),
    "meta.json types": ("meta.json", lambda p: p.write_text(json.dumps(
        {**json.loads(p.read_text()), "source": "somewhere"}))),
}


@pytest.fixture
def listops_data(tmp_path):
  raw = tmp_path / "raw"
  listops_generator.write_release(raw, num_train=40, num_val=8, num_test=8, min_length=5,
                                  max_length=40, max_depth=4, max_args=4, seed=0)
  data = tmp_path / "data"
  assert main(["data", "prepare", "listops", "--source", str(raw), "--data-dir", str(data)]) == 0
  assert main(["data", "prepare", "listops", "--source", str(raw), "--data-dir", str(data),
               "--cache-name", "reference"]) == 0
  return raw, data


@pytest.mark.parametrize("fault", FAULTS)
def test_damage_is_one_line_and_prepare_rebuilds(listops_data, capsys, fault):
  raw, data = listops_data
  name, inject = FAULTS[fault]
  inject(data / "listops" / name)
  capsys.readouterr()

  # Opening the cache (`lra data inspect`, `lra run`) stops at once on one line.
  assert main(["data", "inspect", "listops", "--data-dir", str(data), "--index", "0"]) == 2
  error = capsys.readouterr().err
  assert error.count("\n") == 1 and error.startswith(f"lra: error: {data / 'listops' / name}: ")
  assert "lra data prepare listops" in error and "Traceback" not in error
  run_dir = data.parent / "run"
  assert main(["run", "listops", "softmax", "--preset", "smoke", "--data-dir", str(data),
               "--config.data.generate=False", "--config.data.cache_name=listops",
               "--run-dir", str(run_dir), "--quiet"]) == 2
  assert capsys.readouterr().err == error
  assert not run_dir.exists()  # reported before any training

  # The command in the message rebuilds the cache (for meta.json, which no longer says where the
  # source was, the task's own prepare command).
  if name == "meta.json":
    command = ["data", "prepare", "listops", "--source", str(raw), "--data-dir", str(data)]
  else:
    words = shlex.split(error.split("Rebuild the cache: ")[1])
    assert words[:3] == ["lra", "data", "prepare"]
    command = words[1:]
  assert main(command) == 0
  out = capsys.readouterr().out
  assert f"rebuilding {data / 'listops'}: {name}" in out and "up to date" not in out
  _same_cache(data / "listops", data / "reference")
  assert main(command) == 0
  assert "up to date" in capsys.readouterr().out


def test_a_byte_between_samples_needs_the_full_check(tmp_path, capsys):
  """Loading samples 17 blocks per array (see integrity); verify and prepare read every byte."""
  data = tmp_path / "data"
  options = ["--option", "num_train=400", "--option", "seq_len=128", "--option", "seed=3"]
  prepare = ["data", "prepare", "synthetic", "--source", str(tmp_path / "none"), "--data-dir",
             str(data), "--cache-name", "synthetic", *options]
  assert main(prepare) == 0
  path = data / "synthetic" / "train.inputs.npy"
  size = path.stat().st_size
  step = (size - 4096) / 16
  assert step > 4096 + 2  # gaps exist between the sampled blocks
  with open(path, "r+b") as f:
    f.seek(int((4096 + step) / 2))  # between the first and second sampled blocks
    byte = f.read(1)
    f.seek(-1, os.SEEK_CUR)
    f.write(bytes([byte[0] ^ 1]))
  PreparedData(data / "synthetic")  # the cheap check does not see it: documented
  capsys.readouterr()
  verify = ["data", "verify", "synthetic", "--data-dir", str(data), "--cache-name", "synthetic"]
  assert main(verify) == 1
  captured = capsys.readouterr()
  assert "train.inputs.npy: its bytes differ from the sha256" in captured.out
  assert "test.inputs.npy: ok" in captured.out and "lra data prepare synthetic" in captured.err
  assert main(prepare) == 0
  assert "rebuilding" in capsys.readouterr().out
  assert main(verify) == 0


def test_an_older_cache_format_is_rebuilt(tmp_path, capsys):
  cache = tmp_path / "cache"
  _synthetic(cache)
  meta = json.loads((cache / "meta.json").read_text())
  (cache / "meta.json").write_text(json.dumps({**meta, "format_version": 1}))
  with pytest.raises(CacheDamagedError, match=r"meta\.json: written by another version .* 1; "):
    PreparedData(cache)
  capsys.readouterr()
  _synthetic(cache)
  assert "rebuilding" in capsys.readouterr().out and PreparedData(cache).meta == meta


def test_generated_data_regenerates_itself(tmp_path):
  """`lra run` with a small preset makes its data again when the cache is damaged."""
  config = resolve_config("synthetic", "softmax", "smoke")
  logged = []
  data = load_data(config, tmp_path, log=logged.append)
  reference = {k: np.array(v) for k, v in data.split("train").items()}
  os.truncate(data.cache_dir / "train.inputs.npy", 100)
  logged.clear()
  again = load_data(config, tmp_path, log=logged.append)
  assert "train.inputs.npy" in logged[0] and "damaged" in logged[0]
  np.testing.assert_array_equal(again.split("train")["inputs"], reference["inputs"])


# --- Killed while preparing: the old cache or none, and the next prepare finishes ----------------

KILL_POINTS = {
    # point: (settings of the new cache, write limit in bytes, files complete when it dies)
    "mid first array": (dict(num_train=300), 8000, []),
    "mid fifth array": (dict(num_train=5, num_val=5, num_test=300), 8000,
                        ["train.inputs.npy", "train.label.npy", "val.inputs.npy",
                         "val.label.npy"]),
    "mid meta.json": (dict(num_train=1, num_val=1, num_test=1, seq_len=8), 1000,
                      [f"{s}.{k}.npy" for s in ("test", "train", "val")
                       for k in ("inputs", "label")]),
}


@pytest.mark.parametrize("point", KILL_POINTS)
@pytest.mark.parametrize("old", [True, False], ids=["over an old cache", "fresh"])
def test_killed_mid_prepare(tmp_path, capsys, point, old):
  settings, limit, complete = KILL_POINTS[point]
  cache = tmp_path / "cache"
  if old:
    _synthetic(cache, seed=7)
  new = {**SMALL, **settings, "seed": 2}
  child = _die_when_a_file_exceeds(
      limit, f"synthetic.prepare({str(tmp_path / 'no_source')!r}, {str(cache)!r}, **{new!r})")
  assert child.returncode == -signal.SIGXFSZ, child.stderr

  # It died inside its own folder beside the cache, at the point meant.
  [leftover] = _leftovers(tmp_path)
  assert leftover.startswith(".cache.tmp-")
  written = sorted(p.name for p in (tmp_path / leftover).iterdir())
  for name in complete:
    path = tmp_path / leftover / name
    assert name in written and integrity.read_header(path)[2] == path.stat().st_size
  assert len(written) == len(complete) + 1  # and one file cut short
  if old:  # the old cache is whole and still opens
    data = PreparedData(cache)
    assert data.meta["settings"]["seed"] == 7 and not any(data.verify().values())
  else:
    with pytest.raises(DataMissingError):
      PreparedData(cache)

  capsys.readouterr()
  synthetic.prepare(tmp_path / "no_source", cache, **new)
  assert f"removed {leftover}, left by an interrupted process" in capsys.readouterr().out
  synthetic.prepare(tmp_path / "no_source", tmp_path / "reference", **new)
  _same_cache(cache, tmp_path / "reference")
  assert _leftovers(tmp_path) == []


def test_killed_between_the_two_renames(tmp_path, capsys):
  """The swap moves the old cache aside, then renames the new one in: a death between the two
  leaves no cache, and the next prepare puts the old one back before deciding."""
  cache, dead = tmp_path / "cache", _owner(_dead_pid())
  _synthetic(cache, seed=7)
  _synthetic(tmp_path / "new", seed=8)
  os.rename(cache, tmp_path / f".cache.old-{dead}")
  os.rename(tmp_path / "new", tmp_path / f".cache.tmp-{dead}")
  with pytest.raises(DataMissingError):
    PreparedData(cache)  # none: never a mix
  capsys.readouterr()
  _synthetic(cache, seed=7)
  captured = capsys.readouterr()
  assert "restored the complete folder" in captured.out and "up to date" in captured.out
  assert _leftovers(tmp_path) == []
  # Killed after the swap, before the old folder was deleted: the next prepare deletes it.
  _synthetic(tmp_path / "old", seed=9)
  os.rename(tmp_path / "old", tmp_path / f".cache.old-{dead}")
  _synthetic(cache, seed=7)
  assert "up to date" in capsys.readouterr().out and _leftovers(tmp_path) == []


def test_a_live_process_keeps_its_folder(tmp_path):
  """Two prepares of one cache at once: neither deletes the other's work in progress."""
  busy = tmp_path / f".cache.tmp-{_owner(os.getppid())}"
  busy.mkdir()
  _synthetic(tmp_path / "cache")
  assert busy.exists()


def test_kill_9_at_any_moment(tmp_path):
  """A real SIGKILL once the new folder has its first array: the old cache or the new one, whole."""
  cache = tmp_path / "cache"
  _synthetic(cache, seed=7)
  big = dict(num_train=10_000, num_val=10_000, num_test=10_000, seq_len=512, min_length=4, seed=2)
  child = subprocess.Popen([sys.executable, "-c", (
      "from lra.tasks.generators import synthetic; "
      f"synthetic.prepare({str(tmp_path / 'none')!r}, {str(cache)!r}, **{big!r})")],
      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.monotonic() + 120
  while time.monotonic() < deadline and child.poll() is None:
    if any((tmp_path / name / "train.inputs.npy").exists() for name in _leftovers(tmp_path)):
      break
    time.sleep(0.001)
  child.kill()
  child.wait()
  data = PreparedData(cache)
  assert data.meta["settings"]["seed"] in (7, 2) and not any(data.verify().values())
  synthetic.prepare(tmp_path / "none", cache, **big)
  assert PreparedData(cache).meta["settings"]["seed"] == 2 and _leftovers(tmp_path) == []


def test_a_full_disk_keeps_the_old_cache(tmp_path):
  """Writes refused (EFBIG, as ENOSPC would be): one line, exit 2, the old cache untouched."""
  data = tmp_path / "data"
  prepare = ["data", "prepare", "synthetic", "--source", str(tmp_path / "none"), "--data-dir",
             str(data), "--cache-name", "synthetic", "--option", "num_train=300",
             "--option", "seq_len=32"]
  assert main([*prepare, "--option", "seed=1"]) == 0
  before = _arrays(data / "synthetic")
  script = textwrap.dedent(f"""
      import resource, sys
      import lra.cli, lra.cli.data
      resource.setrlimit(resource.RLIMIT_FSIZE, (8000, 8000))  # SIGXFSZ stays ignored: EFBIG
      sys.exit(lra.cli.main({[*prepare, "--option", "seed=2"]!r}))
  """)
  child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
  assert child.returncode == 2 and "Traceback" not in child.stderr
  assert child.stderr.count("\n") == 1
  assert child.stderr.startswith("lra: error: Could not write ") and "unchanged" in child.stderr
  after = _arrays(data / "synthetic")
  assert all(np.array_equal(before[k], after[k]) for k in before)
  assert _leftovers(data) == []


# --- Generated raw folders -----------------------------------------------------------------------

def test_listops_generate_killed_mid_file_keeps_the_old_files(tmp_path):
  out = tmp_path / "listops"
  small = dict(num_train=30, num_val=20, num_test=20, min_length=5, max_length=40, max_depth=4,
               max_args=4)
  listops_generator.write_release(out, seed=1, **small)
  old = {p.name: p.read_text() for p in out.iterdir()}
  child = _die_when_a_file_exceeds(
      600, f"write_release({str(out)!r}, seed=2, **{small!r})",
      imports="from lra.tasks.generators.listops import write_release")
  assert child.returncode == -signal.SIGXFSZ, child.stderr
  assert {p.name: p.read_text() for p in out.iterdir()} == old  # never a mix of two seeds
  listops_generator.write_release(out, seed=2, **small)
  listops_generator.write_release(tmp_path / "reference", seed=2, **small)
  assert {p.name: p.read_text() for p in out.iterdir()} == {
      p.name: p.read_text() for p in (tmp_path / "reference").iterdir()}
  assert _leftovers(tmp_path) == []


def test_listops_generate_will_not_replace_a_folder_of_other_files(tmp_path, capsys):
  (tmp_path / "mine").mkdir()
  (tmp_path / "mine" / "notes.txt").write_text("keep")
  assert main(["data", "generate", "listops", "--out", str(tmp_path / "mine"), "--num-train", "2",
               "--num-val", "1", "--num-test", "1"]) == 2
  assert "holds other files (notes.txt)" in capsys.readouterr().err
  assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]
