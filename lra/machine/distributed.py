"""Many devices and many hosts on JAX's own machinery: `jax.distributed` start-up, the 1-D `data`
mesh, global batch arrays assembled from the rows each host reads itself, and telling a lost peer
process from any other error.
"""
from __future__ import annotations

import inspect
import os
import shlex
import sys
from collections.abc import Mapping

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from lra import errors

ENV_FLAG = "LRA_DISTRIBUTED"
PEER_TIMEOUT_ENV = "LRA_PEER_TIMEOUT_S"
DEFAULT_PEER_TIMEOUT_S = 120
# The coordination service's heartbeat ends every process (JAX's fate sharing, a fatal C++ log line
# and an abort) once a peer has been silent this much longer than the collective timeout, so a
# survivor waiting in a collective always gets the clean stop first.
HEARTBEAT_MARGIN_S = 60
EXIT_PEER_LOST = 75  # EX_TEMPFAIL: nothing is wrong with the run; start it again


def initialize(requested: bool = False) -> bool:
  """Calls `jax.distributed.initialize()` when asked by flag or by LRA_DISTRIBUTED=1.

  The coordinator, process count and process id come from the cluster (SLURM, Open MPI, ...) or,
  for a hand launch, from JAX_COORDINATOR_ADDRESS, LRA_NUM_PROCESSES and LRA_PROCESS_ID. Must run
  before anything touches a device. Returns whether it initialised.

  How long a survivor waits for a lost peer (LRA_PEER_TIMEOUT_S, default 120 s): a peer killed
  outright closes its sockets, so the next collective fails at once; a peer that stops answering
  (a frozen or unplugged host) fails it after this timeout (XLA's CPU collective timeout). Either
  error is recognised by `lost_peer` and the run stops as `interrupted`. The backstop, for a
  process blocked outside a collective and for accelerators' collectives, is JAX's heartbeat (set
  to this plus HEARTBEAT_MARGIN_S), which aborts the process with JAX's own fatal message: the
  runtime client's missed-heartbeat callback that could make it clean is not passed on by
  `jax.distributed.initialize`, and a Python one given directly fails (std::bad_cast, jaxlib 0.10).
  """
  if not (requested or os.environ.get(ENV_FLAG, "").lower() in ("1", "true", "yes")):
    return False
  kwargs = {}
  if "LRA_NUM_PROCESSES" in os.environ:
    kwargs["num_processes"] = int(os.environ["LRA_NUM_PROCESSES"])
  if "LRA_PROCESS_ID" in os.environ:
    kwargs["process_id"] = int(os.environ["LRA_PROCESS_ID"])
  timeout = peer_timeout_s()
  if "xla_cpu_collective_timeout_seconds" not in os.environ.get("XLA_FLAGS", ""):
    # Read when the CPU backend starts, which is after this call.
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_cpu_collective_timeout_seconds={timeout}").strip()
  if "heartbeat_timeout_seconds" in inspect.signature(jax.distributed.initialize).parameters:
    kwargs["heartbeat_timeout_seconds"] = timeout + HEARTBEAT_MARGIN_S  # JAX >= 0.7
  jax.distributed.initialize(**kwargs)
  return True


def peer_timeout_s() -> int:
  value = os.environ.get(PEER_TIMEOUT_ENV, str(DEFAULT_PEER_TIMEOUT_S))
  try:
    seconds = int(value)
  except ValueError:
    seconds = 0
  if seconds < 1:
    raise errors.BadValue(f"{PEER_TIMEOUT_ENV}={value!r}: expected a whole number of seconds >= 1, "
                          f"e.g. {PEER_TIMEOUT_ENV}={DEFAULT_PEER_TIMEOUT_S}")
  return seconds


class PeerLost(RuntimeError):
  """Another process of a multi-host run is gone (killed, crashed, its host lost or frozen).

  Attributes:
    lost: the lost process's index when it can be told (always with two processes), else None.
    cause: the first line of the error that revealed it.
    resume_step: the last checkpoint every process finished writing (0: none yet), filled in by
      the train loop for the message; None when the loss happened outside it.
  """

  def __init__(self, lost: int | None, cause: str):
    self.lost, self.cause = lost, cause
    self.resume_step: int | None = None
    super().__init__(self.describe())

  def describe(self) -> str:
    who = "another process" if self.lost is None else f"process {self.lost}"
    return f"lost {who} of {jax.process_count()} ({self.cause})"

  def hint(self) -> str:
    """The one line a survivor prints: who was lost, where the run resumes, the command."""
    where = ("from its last complete checkpoint" if self.resume_step is None else
             "from the start (no checkpoint was complete yet)" if self.resume_step == 0 else
             f"from its checkpoint at step {self.resume_step}")
    command = shlex.join(["lra", *sys.argv[1:]])
    return (f"{self.describe()}; the run is resumable {where}: start all "
            f"{jax.process_count()} processes again with the same command: {command}")

  @property
  def final_json_is_ours(self) -> bool:
    """Process 0 writes final.json; if it is the one lost (or we cannot tell), survivors do."""
    return jax.process_index() == 0 or self.lost in (None, 0)


# What the runtimes say when a peer is gone: collectives (Gloo on CPU, NCCL on GPU) over a closed
# socket or past their timeout, and the coordination service's RPCs and barriers (Orbax's too).
_PEER_LOSS_MARKERS = ("Gloo", "NCCL", "coordination service", "Connection reset",
                      "Connection closed", "Socket closed", "is not connected", "barrier")


def lost_peer(error: BaseException) -> PeerLost | None:
  """`error` as a PeerLost when it says a peer process is gone; None for any other error."""
  if isinstance(error, PeerLost):
    return error
  # is_initialized first: process_count() would start a backend just to answer "one".
  if not (jax.distributed.is_initialized() and isinstance(error, Exception)
          and jax.process_count() > 1):
    return None
  text = str(error)
  if not any(marker in text for marker in _PEER_LOSS_MARKERS):
    return None
  # Two processes: the lost one is the other. More: the runtimes name an address, not a process.
  lost = 1 - jax.process_index() if jax.process_count() == 2 else None
  cause = text.strip().splitlines()[0] if text.strip() else type(error).__name__
  return PeerLost(lost, cause[:200])


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
    raise errors.BadValue(f"this process's devices hold non-contiguous batch rows {spans}; "
                          "order jax.devices() by process (the default) to read one block of rows "
                          "per host")
  return start, stop


def check_micro_batches(batch_size: int, micro_batches: int) -> None:
  """A training batch goes to every device in each of its k micro-batches: B must divide by
  devices x k. The batch size is the protocol's, so the fix offered is another k (the same update
  in fewer, larger micro-batches), or fewer devices where no k can do."""
  devices = jax.device_count()
  if batch_size % (devices * micro_batches) == 0:
    return
  fits = [k for k in range(micro_batches, 0, -1) if batch_size % (devices * k) == 0]
  if fits:
    raise errors.BadValue(
        f"train.batch_size={batch_size} cannot be cut into train.grad_accum_steps={micro_batches} "
        f"micro-batches over {devices} devices (each micro-batch needs a multiple of {devices} "
        f"rows): pass --config.train.grad_accum_steps={fits[0]} (the same update, "
        f"{batch_size // fits[0]} rows a micro-batch)")
  most = max(d for d in range(1, devices + 1) if batch_size % d == 0)
  raise errors.BadValue(
      f"train.batch_size={batch_size} cannot be shared by {devices} devices (the protocol's batch "
      f"is not a multiple of {devices}): run on {most} devices or fewer that divide it")


def check_divisible(name: str, batch_size: int, multiple: int) -> None:
  """An evaluation batch of `name`'s size, shared by `multiple` devices (its size changes no
  score, so a multiple is the fix)."""
  if batch_size % multiple:
    raise errors.BadValue(f"{name}={batch_size} must be a multiple of the {multiple} devices that "
                          f"share it; pass e.g. "
                          f"--config.{name}={max(multiple, batch_size // multiple * multiple)}")


def global_batch(local: Mapping[str, np.ndarray], sharding: NamedSharding,
                 global_rows: int) -> dict[str, jax.Array]:
  """One global array per key from this process's rows (all rows on a single host)."""
  return {key: jax.make_array_from_process_local_data(
      sharding, value, (global_rows, *value.shape[1:])) for key, value in local.items()}


def batch_sharding(mesh: jax.sharding.Mesh) -> NamedSharding:
  return NamedSharding(mesh, P("data"))
