"""What `lra bench`'s measurements (lra/bench/step_time.py, epoch.py, lra_table.py, against.py)
share: the device's name, a compiled program's FLOPs, the command line a generated file records and
the splicing of a generated block into a page.
"""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax

from lra.runs import writers


def write_outputs(report: Any, text: str, *, json_path: Path | None, md_path: Path | None,
                  plot_path: Path | None = None, plot: Callable[[Any, Path], None] | None = None
                  ) -> None:
  """A measurement's files, each where the command was told (folders made): the records as JSON,
  the Markdown `text`, and the figure `plot(report, plot_path)` draws."""
  for path, body in ((json_path, json.dumps(report, indent=1) + "\n"), (md_path, text)):
    if path:
      Path(path).parent.mkdir(parents=True, exist_ok=True)
      Path(path).write_text(body)
  if plot_path and plot is not None:
    Path(plot_path).parent.mkdir(parents=True, exist_ok=True)
    plot(report, Path(plot_path))


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


def write_block(page: Path, report, record: Path | None, markers: tuple[str, str],
                block: Callable[[Any, str], str]) -> None:
  """Replaces `page`'s text between `markers` with `block(report, link)`, the link to the record
  read from the page's own folder (docs/performance.md -> ../results/bench/...)."""
  from lra.report import tables
  link = Path(os.path.relpath(record, Path(page).parent)).as_posix() if record else "-"
  page.write_text(tables.splice_readme(page.read_text(), block(report, link), page, markers,
                                       "lra bench --readme"))
