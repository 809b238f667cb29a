"""Test-wide settings: catch silent broadcasting bugs, keep CPU runs deterministic and small."""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def highest_precision():
  """Full float32 matmuls for a test whose tolerance assumes them. A GPU's default precision
  (TF32) rounds f32 matmul inputs to 11 significant bits and a TPU's (one bf16 pass) to 8: about
  1e-3 relative, ten times the tolerances of a comparison with a formula or another path. The
  CPU computes in f32 either way, so the pin changes nothing here."""
  with jax.default_matmul_precision("highest"):
    yield
