"""Test-wide settings: catch silent broadcasting bugs, keep CPU runs deterministic and small."""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import jax  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
