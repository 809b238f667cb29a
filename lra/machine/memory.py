"""Memory of a compiled step against the device's: XLA's own estimate, the bytes a device offers,
and the one line `lra run` and `lra eval` print when a step does not fit.

Shared by the train loop (a check before the first step) and `lra bench` (records too big to run).
"""
from __future__ import annotations

import os
import re

import jax
import ml_collections

from lra import errors
from lra.machine import isolated

MEMORY_ENV = "LRA_DEVICE_MEMORY"
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


class OutOfMemoryError(errors.UserError, OSError):
  """A step does not fit in the device's memory (estimated before running, or an allocation
  failed); the message is the one line to print."""


def step_bytes(compiled) -> int | None:
  """Bytes one device holds while `compiled` runs, from XLA's memory analysis: arguments + outputs
  + temporaries, less what donation aliases. None when the backend gives no analysis."""
  mem = compiled.memory_analysis()
  if mem is None:
    return None
  return int(mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
             - mem.alias_size_in_bytes)


def device_bytes(device: jax.Device) -> tuple[int | None, str]:
  """(bytes a step may use on `device`, where that number comes from).

  $LRA_DEVICE_MEMORY (e.g. `20GiB`, `512MB`) wins: room left for other jobs on a shared device, or a
  small limit in tests. Then an accelerator's allocator limit (XLA's share of the device, see
  XLA_PYTHON_CLIENT_MEM_FRACTION), else the host's available RAM (a CPU device).
  """
  if os.environ.get(MEMORY_ENV):
    return parse_bytes(os.environ[MEMORY_ENV]), MEMORY_ENV
  stats = device.memory_stats() if device.platform != "cpu" else None
  if stats and "bytes_limit" in stats:
    return int(stats["bytes_limit"]), "its allocator's limit"
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024, "available RAM"
  except OSError:
    pass
  return None, "unknown"


def parse_bytes(text: str) -> int:
  match = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", text)
  if not match or match.group(2).lower() not in _UNITS:
    raise errors.BadValue(f"{MEMORY_ENV}={text!r}: expected a size such as 20GiB, 512MB or a "
                          f"number of bytes, e.g. {MEMORY_ENV}=20GiB")
  return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def is_oom(error: BaseException) -> bool:
  """Whether `error` says memory ran out (the markers live in lra/machine/isolated.py, which lra
  bench's isolated records use too)."""
  return isolated.out_of_memory(str(error)) is not None


def size(n: int | None) -> str:
  if n is None:
    return "an unknown amount"
  return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def shrinking_settings(config: ml_collections.ConfigDict, step: str, need: int | None,
                       have: int | None) -> list[str]:
  """The config settings that make the `step` ("train" or "eval") step smaller, as overrides;
  only settings this config has, and only values that differ from the current ones."""
  # How much smaller: by the estimate when it is over; by half when the estimate fitted.
  ratio = need / have if need and have and need > have else 2.0
  settings = []
  if step == "train":
    t = config.train
    # Activations scale with the micro-batch: the same batch in k slices, the same update.
    k = t.grad_accum_steps
    while k * 2 <= t.batch_size // jax.device_count() and k / t.grad_accum_steps < ratio:
      k *= 2
    if k > t.grad_accum_steps:
      settings.append(f"--config.train.grad_accum_steps={k} (the same batch of "
                      f"{t.batch_size} in slices of {t.batch_size // k}) or a smaller "
                      "--config.train.batch_size")
    if not config.model.remat:
      settings.append("--config.model.remat=true")
  else:
    half = max(config.eval.batch_size // 2 // jax.device_count(), 1) * jax.device_count()
    if half < config.eval.batch_size:
      settings.append(f"--config.eval.batch_size={half}")
  mixer = config.model.mixer
  if mixer in ("softmax", "synthesizer") and not config.mixers[mixer].query_chunk:
    settings.append(f"--config.mixers.{mixer}.query_chunk=128")
  if mixer == "softmax":
    softmax = config.mixers.softmax
    if "implementation" in softmax and softmax.implementation != "cudnn" and (
        jax.devices()[0].platform == "gpu"):
      settings.append("--config.mixers.softmax.implementation=cudnn")
  if config.model.dtype != "bfloat16":
    settings.append("--config.model.dtype=bfloat16")
  return settings


def does_not_fit(config: ml_collections.ConfigDict, step: str, need: int | None,
                 have: int | None, source: str, cause: str = "") -> OutOfMemoryError:
  """The one line for a step that does not fit: the estimate, what the device has, the fixes.

  Args:
    config: the run's config (which settings exist, their values).
    step: "train" or "eval".
    need: XLA's estimate of the step's bytes on one device (None if unknown).
    have: the bytes the device offers (None if unknown), and `source`: where that came from.
    cause: the allocation error's first line, when the step was run and failed.
  """
  device = jax.devices()[0]
  where = f"{device.platform}:{getattr(device, 'device_kind', '')}"
  fixes = shrinking_settings(config, step, need, have)
  what = (f"out of memory in the {step} step ({cause}); XLA estimated {size(need)} per device"
          if cause else f"the {step} step needs {size(need)} per device (XLA's estimate)")
  return OutOfMemoryError(
      f"{what} and {where} has {size(have)} ({source}); to make it fit, add to the same command "
      + ("one or more of: " + "; ".join(fixes) if fixes else
         "a smaller model (--config.model.dim, --config.model.num_layers)"))


def as_out_of_memory(error: BaseException, config: ml_collections.ConfigDict, step: str,
                     need: int | None) -> OutOfMemoryError | None:
  """`error` as the one out-of-memory line of the `step` step, or None if it is no allocation
  failure (a step whose estimate passed and that still failed to allocate)."""
  if isinstance(error, OutOfMemoryError):
    return error
  if not is_oom(error):
    return None
  have, source = device_bytes(jax.devices()[0])
  cause = str(error).strip().splitlines()[0][:200]
  return does_not_fit(config, step, need, have, source, cause=cause)
