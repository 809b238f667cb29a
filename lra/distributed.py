"""Many devices and many hosts on JAX's own machinery: `jax.distributed` start-up, the 1-D `data`
mesh, and global batch arrays assembled from the rows each host reads itself.
"""
from __future__ import annotations

import os
from typing import Mapping

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

ENV_FLAG = "LRA_DISTRIBUTED"


def initialize(requested: bool = False) -> bool:
  """Calls `jax.distributed.initialize()` when asked by flag or by LRA_DISTRIBUTED=1.

  The coordinator, process count and process id come from the cluster (SLURM, Open MPI, ...) or,
  for a hand launch, from JAX_COORDINATOR_ADDRESS, LRA_NUM_PROCESSES and LRA_PROCESS_ID. Must run
  before anything touches a device. Returns whether it initialised.
  """
  if not (requested or os.environ.get(ENV_FLAG, "").lower() in ("1", "true", "yes")):
    return False
  kwargs = {}
  if "LRA_NUM_PROCESSES" in os.environ:
    kwargs["num_processes"] = int(os.environ["LRA_NUM_PROCESSES"])
  if "LRA_PROCESS_ID" in os.environ:
    kwargs["process_id"] = int(os.environ["LRA_PROCESS_ID"])
  jax.distributed.initialize(**kwargs)
  return True


def data_mesh() -> jax.sharding.Mesh:
  """A 1-D `data` mesh over every device of every process.

  A plain Mesh (not jax.make_mesh, whose Explicit axis types broke gathers) leaves everything but
  the batch we place to the compiler.
  """
  return jax.sharding.Mesh(np.asarray(jax.devices()), ("data",))


def local_rows(sharding: NamedSharding, global_rows: int) -> tuple[int, int]:
  """The contiguous [start, stop) rows of a batch-sharded global array this process holds."""
  spans = sorted({(s.start or 0, global_rows if s.stop is None else s.stop) for s in (
      index[0] for index in sharding.addressable_devices_indices_map((global_rows,)).values())})
  start, stop = spans[0][0], spans[-1][1]
  if any(a[1] != b[0] for a, b in zip(spans, spans[1:])):
    raise ValueError(f"this process's devices hold non-contiguous batch rows {spans}; order "
                     "jax.devices() by process (the default) to read one block of rows per host")
  return start, stop


def check_divisible(name: str, batch_size: int, multiple: int) -> None:
  if batch_size % multiple:
    raise ValueError(f"{name}={batch_size} must be a multiple of {multiple} (the "
                     f"{jax.device_count()} devices x gradient accumulation steps); pass e.g. "
                     f"--config.{name}={max(multiple, batch_size // multiple * multiple)}")


def global_batch(local: Mapping[str, np.ndarray], sharding: NamedSharding,
                 global_rows: int) -> dict[str, jax.Array]:
  """One global array per key from this process's rows (all rows on a single host)."""
  return {key: jax.make_array_from_process_local_data(
      sharding, value, (global_rows, *value.shape[1:])) for key, value in local.items()}


def batch_sharding(mesh: jax.sharding.Mesh) -> NamedSharding:
  return NamedSharding(mesh, P("data"))
