"""`lra ARGS...` with probes and faults for the multi-host and fault tests (a harness).

Run as `python tests/lra_probed.py run listops ...` with the environment a user sets for `lra`.
It appends to $LRA_PROBE_LOG one JSON line per batch this process reads (its labels and a digest
of its inputs) and per file it opens for writing or renames inside the run directory (seen by a
Python audit hook, independent of the code under test). With LRA_PROBE_DIE_AT_STEP=K this process
kills itself with SIGKILL (a kill -9 from outside, as its peers see it) when it fetches the batch
of step K, once the checkpoint of step LRA_PROBE_AFTER_CHECKPOINT is complete; with
LRA_PROBE_FREEZE_AT_STEP=K it stops itself with SIGSTOP instead (a host that stops answering).
With LRA_PROBE_DISK_FULL_AT_CHECKPOINT=K, writing the checkpoint of step K fails with ENOSPC
midway (its state written, its bookkeeping not), as on a full disk. With
LRA_PROBE_MEMORY_LIMIT_AT_STEP=K, the process's address space is capped at what it maps plus
LRA_PROBE_MEMORY_MARGIN_MB (default 256) when it fetches the batch of step K, so a step that
allocates more fails in XLA's allocator, as on a device that is full. With
LRA_PROBE_STEP_SECONDS=S, the clock `--stop-after` reads (lra.machine.stop_after) moves S seconds
more at each train batch, as if every step took that long, and the process logs that clock's seconds
since its start when `lra` returns.
"""
import errno
import hashlib
import json
import os
import resource
import signal
import sys
import time
from pathlib import Path

from lra import cli
from lra.machine import stop_after
from lra.training import train

LOG = Path(os.environ["LRA_PROBE_LOG"])
RUN_DIR = Path(sys.argv[sys.argv.index("--run-dir") + 1]).resolve()


def _log(record: dict) -> None:
  with open(LOG, "a") as f:
    f.write(json.dumps(record) + "\n")


def _after_checkpoint() -> None:
  if "LRA_PROBE_AFTER_CHECKPOINT" not in os.environ:
    return
  after = RUN_DIR / "checkpoints" / os.environ["LRA_PROBE_AFTER_CHECKPOINT"]
  deadline = time.time() + 300
  while not after.is_dir() and time.time() < deadline:
    time.sleep(0.05)


_STEP_S = float(os.environ.get("LRA_PROBE_STEP_SECONDS", "0"))
_ahead = [0.0]  # seconds the --stop-after clock is ahead of the real one
if _STEP_S:
  _real_clock = stop_after._clock  # pylint: disable=protected-access
  stop_after._clock = lambda: _real_clock() + _ahead[0]  # pylint: disable=protected-access


def _fault_at(step: int) -> None:
  _ahead[0] += _STEP_S
  if os.environ.get("LRA_PROBE_MEMORY_LIMIT_AT_STEP") == str(step):
    _after_checkpoint()
    with open("/proc/self/status") as f:
      mapped = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    margin = int(os.environ.get("LRA_PROBE_MEMORY_MARGIN_MB", "256")) << 20
    resource.setrlimit(resource.RLIMIT_AS, (mapped + margin, resource.RLIM_INFINITY))
  for name, sig in (("DIE", signal.SIGKILL), ("FREEZE", signal.SIGSTOP)):
    if os.environ.get(f"LRA_PROBE_{name}_AT_STEP") == str(step):
      _after_checkpoint()
      _log({"kind": name.lower(), "step": step, "time": time.time()})
      os.kill(os.getpid(), sig)


def _probed(batches, kind: str):
  def wrapper(*args, **kwargs):
    step = 0
    if kind == "train":  # step_batches(arrays, spec, batch_size, seed, start_step, ...)
      step = kwargs.get("start_step", args[4] if len(args) > 4 else 0)
    for batch in batches(*args, **kwargs):
      if kind == "train":
        step += 1
        _fault_at(step)
      parts = batch if isinstance(batch, tuple) else (batch,)  # a step's micro-batches, in order
      inputs = [part[k] for part in parts for k in sorted(part) if k.startswith("inputs")]
      _log({"kind": kind, "step": step, "time": time.time(),
            "label": [y for part in parts for y in part["label"].tolist()],
            "inputs": hashlib.sha256(b"".join(a.tobytes() for a in inputs)).hexdigest()})
      yield batch
  return wrapper


def _audit(event: str, args: tuple) -> None:
  if event == "open" and isinstance(args[0], (str, os.PathLike)):
    path, mode, flags = args
    writing = (mode and any(c in mode for c in "wax+")) or (
        not mode and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
    written = [path] if writing else []
  elif event in ("os.rename", "os.replace", "os.link"):
    written = [args[1]]
  else:
    return
  for path in written:
    path = Path(os.fsdecode(path)).absolute()
    if RUN_DIR in path.parents:
      _log({"kind": "write", "path": str(path.relative_to(RUN_DIR))})


def _disk_full_at(step: str) -> None:
  from orbax.checkpoint._src.handlers import json_checkpoint_handler
  handler = json_checkpoint_handler.JsonCheckpointHandler
  real = handler._save_fn  # pylint: disable=protected-access

  async def save(self, item, directory):
    if Path(str(directory)).parent.name.startswith(f"{step}."):  # checkpoints/K.orbax-...-tmp
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(directory))
    return await real(self, item, directory)
  handler._save_fn = save  # pylint: disable=protected-access


if "LRA_PROBE_DISK_FULL_AT_CHECKPOINT" in os.environ:
  _disk_full_at(os.environ["LRA_PROBE_DISK_FULL_AT_CHECKPOINT"])
train.step_batches = _probed(train.step_batches, "train")
train.eval_batches = _probed(train.eval_batches, "eval")
sys.addaudithook(_audit)
sys.argv[0] = "lra"
code = cli.main()  # as the `lra` command calls it: argv from sys.argv
if _STEP_S:
  clock = stop_after._clock  # pylint: disable=protected-access
  _log({"kind": "exit", "elapsed": clock() - stop_after.STARTED})
sys.exit(code)
