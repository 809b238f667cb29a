"""Test-wide settings: catch silent broadcasting bugs, keep CPU runs deterministic and small."""
import atexit
import os
import shutil
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
# One compilation cache for the session, shared by the `lra` subprocesses the tests start (they
# inherit the environment): many tests run the same smoke steps, and compiling them once instead
# of in every process halves the suite's time on a 2-core CPU. A fresh folder per session, so
# nothing compiled by an older checkout is ever read.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="lra-tests-xla-cache-")
  atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
  os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
  os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"

import jax  # noqa: E402
import pytest  # noqa: E402

from lra.runs.config_loading import load_data, resolve_config  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def step_clock(monkeypatch):
  """Call it to give `--stop-after` a clock that counts work, not seconds: a training step takes
  1 s, an evaluation of a split 3 s, a save 2 s (a best-params save nothing), so a stop falls on
  the same step on any machine. The test's monkeypatch.undo() takes it away."""
  from lra.machine import stop_after  # pylint: disable=import-outside-toplevel
  from lra.runs import checkpoints
  from lra.training import train

  def install():
    now = [0.0]

    def tick(seconds):
      now[0] += seconds
      return now[0]
    monkeypatch.setattr(stop_after, "_clock", lambda: tick(1.0))
    monkeypatch.setattr(stop_after, "STARTED", 0.0)
    evaluate, save = train.evaluate, checkpoints.Checkpointer.save
    monkeypatch.setattr(train, "evaluate", lambda *a, **k: (tick(3.0), evaluate(*a, **k))[1])
    monkeypatch.setattr(checkpoints.Checkpointer, "save", lambda self, *a, **k: (
        k.get("best") or tick(2.0), save(self, *a, **k))[1])
  return install


@pytest.fixture
def highest_precision():
  """Full float32 matmuls for a test whose tolerance assumes them. A GPU's default precision
  (TF32) rounds f32 matmul inputs to 11 significant bits and a TPU's (one bf16 pass) to 8: about
  1e-3 relative, ten times the tolerances of a comparison with a formula or another path. The
  CPU computes in f32 either way, so the pin changes nothing here."""
  with jax.default_matmul_precision("highest"):
    yield


def pytest_xdist_auto_num_workers(config) -> int:
  """`-n auto` (setup.cfg): one worker per core, at most 4. Each test runs its XLA computations on
  one thread (XLA_FLAGS above), so two workers halve the suite on a 2-core CPU; past 4 a worker's
  memory (a few GB at peak) matters more than its core."""
  return max(1, min(4, os.cpu_count() or 1))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  """ListOps' smoke data (generated, small), prepared once per test module that asks for it."""
  root = tmp_path_factory.mktemp("data")
  load_data(resolve_config("listops", "softmax", "smoke"), root, log=lambda _: None)
  return root
