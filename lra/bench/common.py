"""What `lra bench` (lra/bench/step_time.py) and `lra bench --epoch` (lra/bench/epoch.py) share:
the device's name, a compiled program's FLOPs and the command line a generated file records.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence

import jax

from lra.runs import writers


def device_name(device: jax.Device) -> str:
  """`platform:kind`, e.g. `gpu:NVIDIA H200` or `cpu:cpu`: what a record says it ran on."""
  return f"{device.platform}:{getattr(device, 'device_kind', '')}"


def compiled_flops(compiled) -> float | None:
  """XLA's FLOP count of a compiled program, or None where the backend gives none."""
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost  # older jax: one dict per module
  flops = (cost or {}).get("flops")
  return float(flops) if flops and flops > 0 else None


def recorded_command(argv: Sequence[str] | None = None) -> str:
  """The `lra bench ...` line a generated file names, without this machine in it: paths under the
  current folder become relative and the home folder becomes ~, so the line re-runs from a
  checkout anywhere."""
  argv = list(sys.argv if argv is None else argv)
  if argv[1:2] != ["bench"]:
    return "lra bench"
  return " ".join(["lra bench", *map(writers.portable, argv[2:])])
