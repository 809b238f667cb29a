"""Where the time of the paper ListOps Latte step goes, and what each lever buys, in minutes.

  python tools/step_probe.py --out DIR             # on the accelerator JAX finds, <= 4 minutes
  python tools/step_probe.py --quick --out DIR     # tiny sizes: a CPU try-out in tens of seconds

The runner's own jitted train step (lra.training.train.setup / make_steps, donated state, the
`paper` preset of `lra run listops latte`) on LRA-size ListOps batches drawn from the suite's
generator (lengths 500-2,000, depth 10, padded to T=2,000), timed as: baseline; the `unsafe_rbg`
and `rbg` dropout generators; bf16 compute; bf16 with `unsafe_rbg`; dropout 0 (the most any dropout
generator can buy); and the baseline again (drift). Each variant records its compile time, its
steps/s, XLA's cost analysis (FLOPs and bytes accessed per step) and what those make per second
(TFLOP/s, TB/s), and a jax.profiler trace of TRACE_STEPS steps summarised as device busy %, kernels
per step and the top kernels. A variant that would pass the budget is `not run`. It writes
step_probe.json and step_probe.md into --out and prints what the numbers decide
(docs/accelerator_check.md, "What the step probe decides").
"""
from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TRACE_STEPS = 6
VARIANTS = (
    ("baseline", ()),
    # Sorted micro-batches (issue 57): the same batches, rows by length in k micro-batches, each
    # padded to its own longest; one update. The CPU measured the ratio to fixed padding in
    # results/bench/listops_sorted_paper.md; a GPU's should come within 15% of it.
    ("sorted_k4", ("data.padding=sorted", "train.grad_accum_steps=4")),
    ("unsafe_rbg", ("train.dropout_bits=unsafe_rbg",)),
    ("rbg", ("train.dropout_bits=rbg",)),
    ("bf16", ("model.dtype=bfloat16",)),
    ("bf16_unsafe_rbg", ("model.dtype=bfloat16", "train.dropout_bits=unsafe_rbg")),
    ("dropout0", ("model.dropout=0.0",)),
    ("sorted_k2", ("data.padding=sorted", "train.grad_accum_steps=2")),
    ("sorted_k8", ("data.padding=sorted", "train.grad_accum_steps=8")),
    ("baseline_again", ()),
)
# Every variant starts from fixed padding and one micro-batch, what the baseline has always timed,
# whatever the preset's own batching.
FIXED = ("data.padding=fixed", "train.grad_accum_steps=1")
# What the CPU measured for the paper ListOps Latte shapes (steps/s of sorted k=4 over fixed
# padding, one run, modes interleaved), which the GPU's ratio is held against: read from the
# record (`lra bench --epoch`), never typed here.
CPU_SORTED_SOURCE = "results/bench/listops_sorted_paper.json"


def cpu_sorted_ratio(mixer: str = "latte") -> float:
  """Sorted k=4's steps/s over fixed padding's in the CPU record of `mixer` (CPU_SORTED_SOURCE;
  k = configs/common.py SORTED_MICRO_BATCHES)."""
  from lra.configs.common import SORTED_MICRO_BATCHES  # pylint: disable=import-outside-toplevel
  mode = f"sorted{SORTED_MICRO_BATCHES}"
  records = json.loads((REPO / CPU_SORTED_SOURCE).read_text())
  record = next(r for r in records if r["setup"]["mixer"] == mixer)
  return next(m["speedup_vs_fixed"] for m in record["modes"] if m["mode"] == mode)
# LRA's ListOps (the generator's defaults) and the paper preset's batch; --quick: a tiny model on
# short expressions, so a CPU runs every variant in seconds.
SIZES = {
    "full": dict(seq_len=2000, overrides=(), examples=dict(min_length=500, max_length=2000,
                                                           max_depth=10, max_args=10),
                 batches=4, min_time_s=2.0, min_steps=50, sync_every=25),
    "quick": dict(seq_len=64, overrides=("model.num_layers=1", "model.dim=32", "model.mlp_dim=64",
                                         "train.batch_size=8"),
                  examples=dict(min_length=8, max_length=60, max_depth=4, max_args=5),
                  batches=2, min_time_s=0.2, min_steps=4, sync_every=2),
}


# ---------------------------------------------------------------------------------------------
# The step and its batches.

def listops_batches(batch_size: int, seq_len: int, count: int, examples: dict[str, int],
                    seed: int = 0) -> list[dict[str, Any]]:
  """`count` train batches of generated ListOps, as the runner's `fixed` padding makes them:
  inputs [B,T] int32, mask [B,T] bool, label [B] int32, weight [B] float32."""
  import numpy as np
  from lra.tasks.generators import listops as generator
  from lra.tasks.sources import listops as source
  drawn = generator.generate_examples(batch_size * count, seed=seed, **examples)
  batches = []
  for start in range(0, len(drawn), batch_size):
    rows = drawn[start:start + batch_size]
    inputs = np.zeros((batch_size, seq_len), np.int32)
    for row, (text, _) in enumerate(rows):
      tokens = source.tokenize(text)[:seq_len]
      inputs[row, :len(tokens)] = tokens
    batches.append({"inputs": inputs, "mask": inputs != 0,
                    "label": np.asarray([label for _, label in rows], np.int32),
                    "weight": np.ones(batch_size, np.float32)})
  return batches


def paper_config(overrides: tuple[str, ...] = (), task: str = "listops", mixer: str = "latte",
                 preset: str = "paper"):
  from lra.runs.config_loading import resolve_config
  return resolve_config(task, mixer, preset, list(overrides))


def costs(compiled) -> dict[str, float | None]:
  """XLA's cost analysis of a compiled step: FLOPs and bytes accessed (None where absent)."""
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost  # older JAX: one per module
  cost = cost or {}
  flops, accessed = cost.get("flops"), cost.get("bytes accessed")
  return {"flops": float(flops) if flops and flops > 0 else None,
          "bytes_accessed": float(accessed) if accessed and accessed > 0 else None}


def abstract_step_cost(config, spec) -> dict[str, Any]:
  """Compiles a config's train step for `spec` without running it or holding its state: XLA's
  FLOPs and bytes per step (what tools/ledger_costs.py estimates rows from)."""
  import jax
  import jax.numpy as jnp
  from lra.training import train
  s = train.setup(config, spec)
  state = jax.eval_shape(lambda: train.init_state(s, spec, 0))
  state = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s.replicated),
                       state)
  rows, length = config.train.batch_size, spec.seq_len
  keys = ("inputs1", "inputs2") if spec.dual else ("inputs",)
  shapes = {**{k: ((rows, length), jnp.int32) for k in keys},
            **{"mask" + k[len("inputs"):]: ((rows, length), jnp.bool_) for k in keys},
            "label": ((rows,), jnp.int32), "weight": ((rows,), jnp.float32)}
  batch = {k: jax.ShapeDtypeStruct(shape, dtype, sharding=s.put.sharding)
           for k, (shape, dtype) in shapes.items()}
  began = time.perf_counter()
  compiled = s.train_step.lower(state, batch).compile()
  return {**costs(compiled), "compile_s": time.perf_counter() - began}


# ---------------------------------------------------------------------------------------------
# Traces.

# Lines of a device plane that summarise others (xprof adds them); kernels live on the streams.
_DERIVED_LINES = ("XLA Modules", "XLA Ops", "Steps", "Framework", "Source", "Launch Stats",
                  "TensorFlow")
# CPU: what XLA's own thunks are called on the host's XLA threads (no device plane there).
_CPU_BOOKKEEPING = ("end:", "ThreadpoolListener", "ThunkExecutor", "SlinkyThreadPool")


def _events(trace_dir: Path) -> tuple[list[tuple[str, float, float]], str]:
  """(name, start ns, duration ns) of every kernel in the newest xplane under `trace_dir`, and
  where they came from: a device's streams, or (no device plane: a CPU) XLA's host threads."""
  import jax
  planes_files = sorted(Path(trace_dir).rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
  if not planes_files:
    return [], "no xplane.pb written"
  data = jax.profiler.ProfileData.from_file(str(planes_files[-1]))
  kernels, source = [], ""
  for plane in data.planes:
    if not plane.name.startswith("/device:"):
      continue
    lines = list(plane.lines)
    streams = [line for line in lines if line.name.startswith("Stream")] or [
        line for line in lines if not line.name.startswith(_DERIVED_LINES)]
    for line in streams:
      kernels += [(e.name, e.start_ns, e.duration_ns) for e in line.events]
    source = f"{plane.name}, {len(streams)} stream(s)"
  if kernels:
    return kernels, source
  for plane in data.planes:
    if plane.name == "/host:CPU":
      for line in plane.lines:
        if line.name.startswith("tf_XLA"):
          kernels += [(e.name, e.start_ns, e.duration_ns) for e in line.events
                      if not e.name.startswith(_CPU_BOOKKEEPING)]
  return kernels, "no device plane (a CPU): XLA's thunks on the host's XLA threads"


def summarise_trace(trace_dir: Path, steps: int, top: int = 8) -> dict[str, Any]:
  """Device busy % (the union of kernel intervals over the span from the first kernel's start to
  the last one's end), kernels per step, and the `top` kernels by total time."""
  kernels, source = _events(trace_dir)
  if not kernels:
    return {"source": source, "kernels_per_step": None, "busy_percent": None, "top": []}
  spans = sorted((start, start + duration) for _, start, duration in kernels)
  busy, end = 0.0, spans[0][0]
  for start, stop in spans:
    if stop > end:
      busy += stop - max(start, end)
      end = stop
  window = spans[-1][1] - spans[0][0]
  totals: dict[str, list[float]] = {}
  for name, _, duration in kernels:
    entry = totals.setdefault(name, [0, 0.0])
    entry[0] += 1
    entry[1] += duration
  all_ns = sum(entry[1] for entry in totals.values())
  ranked = sorted(totals.items(), key=lambda item: -item[1][1])[:top]
  return {"source": source, "kernels_per_step": len(kernels) / steps,
          "busy_percent": 100.0 * busy / window if window > 0 else None,
          "window_ms": window / 1e6, "kernel_ms_per_step": all_ns / 1e6 / steps,
          "top": [{"name": name[:120], "calls_per_step": count / steps,
                   "ms_per_step": ns / 1e6 / steps, "percent": 100.0 * ns / all_ns}
                  for name, (count, ns) in ranked]}


# ---------------------------------------------------------------------------------------------
# One variant.

def probe_variant(name: str, overrides: tuple[str, ...], sizes: dict[str, Any],
                  batches: list[dict[str, Any]], deadline: float, work: Path) -> dict[str, Any]:
  """Compiles, times and traces the train step of one variant."""
  import jax
  from lra.training import train
  from lra.tasks.contract.spec import TaskSpec
  config = paper_config((*FIXED, *sizes["overrides"], *overrides))
  spec = TaskSpec(vocab_size=16, seq_len=sizes["seq_len"], num_classes=10)
  s = train.setup(config, spec)
  state = train.init_state(s, spec, config.train.seed)
  record: dict[str, Any] = {"variant": name, "overrides": list(overrides),
                            "dropout_bits": config.train.dropout_bits,
                            "dtype": config.model.dtype, "dropout": config.model.dropout}
  began = time.perf_counter()
  step, state, per_step = _compiled_step(s, state, batches, config, spec)
  record["compile_s"] = time.perf_counter() - began
  record.update(per_step)
  for i in range(2):  # warm-up: allocations, autotuned kernels' first launches
    state, sums = step(state, i)
  jax.block_until_ready(state)
  steps, began = 0, time.perf_counter()
  while True:  # the host queues steps ahead as the runner does; it waits every sync_every
    state, sums = step(state, steps)
    steps += 1
    if steps >= sizes["min_steps"] and steps % sizes["sync_every"] == 0:
      jax.block_until_ready(state)
      took = time.perf_counter() - began
      if took >= sizes["min_time_s"] or time.monotonic() > deadline - 20:
        break
  rate = steps / took
  record.update(timed_steps=steps, steps_per_s=rate, ms_per_step=1e3 / rate,
                loss=float(sums["loss_sum"]) / max(float(sums["count"]), 1.0))
  if record["flops"]:
    record["tflop_per_s"] = record["flops"] * rate / 1e12
  if record["bytes_accessed"]:
    record["tb_per_s"] = record["bytes_accessed"] * rate / 1e12
  trace_dir = work / f"trace_{name}"
  try:
    began = time.perf_counter()
    with jax.profiler.trace(str(trace_dir)):
      for i in range(TRACE_STEPS):
        state, sums = step(state, i)
      jax.block_until_ready(state)
    record["trace_wall_ms_per_step"] = (time.perf_counter() - began) * 1e3 / TRACE_STEPS
    record["trace"] = summarise_trace(trace_dir, TRACE_STEPS)
  except Exception as error:  # noqa: BLE001 - a profiler that cannot start loses the trace only
    record["trace"] = {"source": f"no trace: {type(error).__name__}: {str(error)[:200]}",
                       "top": []}
  record["status"] = "ok"
  return record


def _compiled_step(s, state, batches: list[dict[str, Any]], config, spec):
  """(step(state, i): the train step of batch i mod len(batches), the state, XLA's FLOPs and
  bytes per step averaged over the batches). Its programs are compiled ahead (AOT), as one
  program for a whole batch or, with micro-batches, one per micro-batch shape and the update;
  nothing waits between them, as in the runner."""
  import jax
  import numpy as np
  from lra.tasks.contract.batches import Batching, split_batch
  batching = Batching.of(config)
  rows = config.train.batch_size
  if batching.micro_batches == 1 and not batching.sorts:
    placed = [s.put(batch, rows) for batch in batches]
    compiled = s.train_step.lower(state, placed[0]).compile()  # the AOT program is what runs
    return ((lambda state, i: compiled(state, placed[i % len(placed)])), state,
            {**costs(compiled), "programs": 1})
  step = s.train_step
  micro = [[s.put(m, len(m["label"])) for m in split_batch(batch, batching, spec.seq_len)]
           for batch in batches]
  total = step.zeros(state.params, False)
  programs, cost = {}, {"flops": 0.0, "bytes_accessed": 0.0}
  for parts in micro:
    for part in parts:
      key = part["mask"].shape
      if key not in programs:
        programs[key] = step.accumulate.lower(total, state.params, part, state.step,
                                              np.int32(0)).compile()
      for name, value in costs(programs[key]).items():
        cost[name] = None if value is None or cost[name] is None else cost[name] + value
  update = step.update.lower(state, total).compile()
  for name, value in costs(update).items():
    cost[name] = None if value is None or cost[name] is None else cost[name] + len(micro) * value
  cost = {name: None if value is None else value / len(micro) for name, value in cost.items()}
  cost["programs"] = len(programs) + 1  # each micro-batch length's, and the update's

  def run(state, i):
    total = step.zeros(state.params, False)
    for index, part in enumerate(micro[i % len(micro)]):
      total = programs[part["mask"].shape](total, state.params, part, state.step, np.int32(index))
    return update(state, total)
  jax.block_until_ready(total)
  return run, state, cost


# ---------------------------------------------------------------------------------------------
# The probe and its report.

def decide(records: list[dict[str, Any]]) -> list[str]:
  """What the timings say for the `paper` preset's defaults (docs/accelerator_check.md)."""
  rate = {r["variant"]: r.get("steps_per_s") for r in records if r.get("status") == "ok"}
  if not rate.get("baseline"):
    return ["No baseline timing: nothing to decide."]
  base = rate["baseline"]
  drift = (abs(rate["baseline_again"] / base - 1.0) if rate.get("baseline_again") else None)
  noise = max(drift or 0.0, 0.02)  # below 2% nothing is told apart from run-to-run noise
  lines = [f"Baseline {base:.1f} steps/s; drift over the probe "
           + (f"{100 * drift:.1f}%" if drift is not None else "not measured") + "."]
  best = max(("unsafe_rbg", "rbg"), key=lambda v: rate.get(v) or 0.0)
  if rate.get(best) and rate[best] / base - 1.0 > noise:
    lines.append(f"Dropout generator: `{best}` is {100 * (rate[best] / base - 1):.1f}% faster "
                 f"than threefry (more than the {100 * noise:.1f}% noise): set "
                 f"PAPER_DROPOUT_BITS = \"{best}\" in configs/common.py before the next row "
                 "starts (rows in progress keep theirs).")
  else:
    lines.append("Dropout generator: no gain beyond noise; PAPER_DROPOUT_BITS stays threefry.")
  if rate.get("dropout0"):
    lines.append(f"Dropout 0 (the most any generator could buy): "
                 f"{100 * (rate['dropout0'] / base - 1):+.1f}%.")
  if rate.get("bf16"):
    lines.append(f"bf16: {100 * (rate['bf16'] / base - 1):+.1f}% (stays opt-in until a bf16 row "
                 "lands within its f32 seed spread).")
  lines += _decide_sorted(rate, base, noise)
  return lines


def _decide_sorted(rate: dict[str, float | None], base: float, noise: float) -> list[str]:
  """The micro-batches of sorted padding (configs/common.py SORTED_MICRO_BATCHES, 4): the GPU's
  ratio to fixed padding against the CPU's, and the k that is fastest beyond the noise."""
  from lra.configs.common import SORTED_MICRO_BATCHES
  sorted_rates = {k: rate.get(f"sorted_k{k}") for k in (2, 4, 8) if rate.get(f"sorted_k{k}")}
  if not sorted_rates:
    return []
  ratios = ", ".join(f"k={k} {r / base:.2f}x" for k, r in sorted_rates.items())
  cpu = cpu_sorted_ratio()
  lines = [f"Sorted micro-batches against fixed padding: {ratios}; the CPU's k=4 ratio was "
           f"{cpu:.2f}x ({CPU_SORTED_SOURCE})."]
  current = sorted_rates.get(SORTED_MICRO_BATCHES)
  if current:
    off = current / base / cpu - 1.0
    lines.append(f"The k={SORTED_MICRO_BATCHES} ratio is {100 * off:+.0f}% off the CPU's"
                 + (": within 15%." if abs(off) <= 0.15 else ": more than 15%, the GPU's "
                    "ledger costs take the GPU's ratio, not the CPU's."))
    best = max(sorted_rates, key=sorted_rates.get)
    if best != SORTED_MICRO_BATCHES and sorted_rates[best] / current - 1.0 > noise:
      lines.append(f"k={best} is {100 * (sorted_rates[best] / current - 1):.1f}% faster than "
                   f"k={SORTED_MICRO_BATCHES} (more than the noise): set SORTED_MICRO_BATCHES = "
                   f"{best} in configs/common.py before the next row starts (rows in progress "
                   "keep theirs).")
  return lines


def render(report: dict[str, Any]) -> str:
  env = report["environment"]
  lines = [f"# Step probe: {env['device']}, {report['date']}", ""]
  if report["quick"]:
    lines += [f"**A `--quick` run** ({env['device']}, tiny sizes): the report's format; its "
              "numbers say nothing about an accelerator.", ""]
  lines += [f"Made by `{report['command']}` at commit {report['commit']}; JAX "
            f"{env['jax']}, budget {report['budget_s']:.0f} s, used {report['wall_s']:.0f} s. "
            f"The paper ListOps Latte train step (`lra run listops latte`, preset paper: "
            f"{report['model']}), generated LRA-size batches padded to T={report['seq_len']}; "
            f"steps/s over at least {report['min_time_s']:g} s after 2 warm-up steps; XLA's "
            "cost analysis per step; a trace of "
            f"{TRACE_STEPS} steps.", "",
            "| variant | status | compile s | steps/s | ms/step | vs baseline | GFLOP/step | "
            "GB/step | TFLOP/s | TB/s | busy % | kernels/step |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
  base = next((r.get("steps_per_s") for r in report["variants"] if r["variant"] == "baseline"),
              None)
  for r in report["variants"]:
    trace = r.get("trace") or {}
    rel = (f"{r['steps_per_s'] / base:.3f}x" if base and r.get("steps_per_s") else "-")
    lines.append(
        f"| {r['variant']} | {r['status']} | {_n(r.get('compile_s'), '.1f')} | "
        f"{_n(r.get('steps_per_s'), '.2f')} | {_n(r.get('ms_per_step'), '.2f')} | {rel} | "
        f"{_n(r.get('flops'), '.1f', 1e-9)} | {_n(r.get('bytes_accessed'), '.2f', 1e-9)} | "
        f"{_n(r.get('tflop_per_s'), '.2f')} | {_n(r.get('tb_per_s'), '.3f')} | "
        f"{_n(trace.get('busy_percent'), '.1f')} | {_n(trace.get('kernels_per_step'), '.0f')} |")
  lines += ["", "## What it decides", ""] + [f"- {line}" for line in report["decision"]]
  for r in report["variants"]:
    trace = r.get("trace") or {}
    if trace.get("top"):
      lines += ["", f"## Top kernels: {r['variant']} ({trace['source']}; "
                f"{_n(trace.get('kernel_ms_per_step'), '.2f')} ms of kernels per step)", "",
                "| kernel | calls/step | ms/step | % |", "|---|---:|---:|---:|"]
      lines += [f"| `{k['name'].replace('|', '/')}` | {k['calls_per_step']:.1f} | "
                f"{k['ms_per_step']:.3f} | {k['percent']:.1f} |" for k in trace["top"]]
  return "\n".join(lines) + "\n"


def _n(x, fmt: str, scale: float = 1.0) -> str:
  return "-" if x is None else format(x * scale, fmt)


def run_probe(args: argparse.Namespace) -> dict[str, Any]:
  import jax
  start = time.monotonic()
  deadline = start + args.budget_s
  sizes = SIZES["quick" if args.quick else "full"]
  device = jax.devices()[0]
  config = paper_config(sizes["overrides"])
  report = {
      "date": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
      "command": "python tools/step_probe.py " + shlex.join(args.argv), "quick": args.quick,
      "commit": args.commit or _git_commit(), "budget_s": args.budget_s,
      "environment": {"device": f"{device.platform}:{getattr(device, 'device_kind', '')}",
                      "jax": jax.__version__, "device_count": jax.device_count()},
      "model": (f"{config.model.num_layers} layers, D={config.model.dim}, batch "
                f"{config.train.batch_size}, dropout {config.model.dropout}"),
      "seq_len": sizes["seq_len"], "min_time_s": sizes["min_time_s"], "variants": []}
  out = Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  batches = listops_batches(config.train.batch_size, sizes["seq_len"], sizes["batches"],
                            sizes["examples"])
  chosen = [v for v in VARIANTS if not args.variants or v[0] in args.variants.split(",")]
  with tempfile.TemporaryDirectory(prefix="lra_probe_") as work:
    for name, overrides in chosen:
      began = time.monotonic()
      if report["variants"] and began > deadline - _expected_s(report["variants"]):
        record = {"variant": name, "status": "not run: out of time"}
      else:
        try:
          record = probe_variant(name, overrides, sizes, batches, deadline, Path(work))
        except Exception as error:  # noqa: BLE001 - one variant's failure must not lose the rest
          record = {"variant": name, "status": f"failed: {type(error).__name__}: "
                                               f"{str(error).splitlines()[0][:200]}"}
      record["seconds"] = round(time.monotonic() - began, 1)
      report["variants"].append(record)
      print(f"{name}: {record['status']}" + (f", {record['steps_per_s']:.2f} steps/s, compile "
                                             f"{record['compile_s']:.1f} s" if record.get(
                                                 "steps_per_s") else ""), flush=True)
      report["decision"] = decide(report["variants"])
      report["wall_s"] = round(time.monotonic() - start, 1)
      _write(report, out)
  if args.lra_table:
    probe_lra_table(args, deadline, out)
  if args.against is not None:
    probe_against(args, deadline, out)
  for line in report["decision"]:
    print(line)
  return report


def probe_lra_table(args: argparse.Namespace, deadline: float, out: Path) -> None:
  """`lra bench --lra-table` in LRA's own setting (batch 32, T=1K-4K; --quick: a tiny model at
  T=128 and 256) in what is left of the budget, every mixer at a length before any at the next,
  written to lra_table.json and lra_table.md: the device's column for docs/performance.md."""
  from lra.bench import lra_table, step_time
  sizes = dict(dim=16, num_layers=1, num_heads=2) if args.quick else lra_table.LRA_SIZES
  lengths = (128, 256) if args.quick else lra_table.LENGTHS
  records = step_time.run_bench(
      lra_table.MIXERS, lengths, 2 if args.quick else lra_table.LRA_BATCH, **sizes,
      num_steps=3, warmup_steps=1, min_time_s=0.5, deadline=deadline, by_length=True,
      preset=lra_table.PRESET, overrides_for=lra_table.overrides_for,
      log=lambda line: print(f"lra-table: {line}", flush=True))
  report = {"command": "python tools/step_probe.py " + shlex.join(args.argv),
            "git": args.commit or _git_commit(), "records": records,
            "date": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d}"}
  (out / "lra_table.json").write_text(json.dumps(report, indent=1) + "\n")
  (out / "lra_table.md").write_text(lra_table.markdown(report))


def probe_against(args: argparse.Namespace, deadline: float, out: Path) -> None:
  """`lra bench --against`'s cases at the papers' batches (--quick: tiny ones) in what is left of
  the budget, written to against.json and against.md: the device's figures for docs/performance.md,
  "The authors' layers" (the clones named, e.g. carried in an ignored folder of the checkout)."""
  from lra.bench import against
  cases = [against.shrink(c) if args.quick else c for c in against.CASES.values()]
  records = against.run_cases(cases, args.against, deadline=deadline,
                              log=lambda line: print(f"against: {line}", flush=True))
  report = against.make_report("python tools/step_probe.py " + shlex.join(args.argv),
                               args.commit or _git_commit(), records)
  (out / "against.json").write_text(json.dumps(report, indent=1) + "\n")
  (out / "against.md").write_text(against.markdown(report))


def _expected_s(done: list[dict[str, Any]]) -> float:
  """A variant's time, judged by the ones run so far (the slowest)."""
  return max((r.get("seconds") or 0.0) for r in done)


def _write(report: dict[str, Any], out: Path) -> None:
  (out / "step_probe.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
  (out / "step_probe.md").write_text(render(report))


def _git_commit() -> str:
  import subprocess
  try:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return "unknown (no git checkout: pass --commit)"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", type=Path, required=True, help="folder for step_probe.json|md")
  parser.add_argument("--quick", action="store_true", help="tiny sizes (a CPU try-out)")
  parser.add_argument("--budget-s", type=float, default=240, help="wall time for all variants "
                      "(default 240)")
  parser.add_argument("--variants", help="comma-separated subset of " +
                      ",".join(v[0] for v in VARIANTS))
  parser.add_argument("--commit", help="the commit probed (default: git rev-parse HEAD)")
  parser.add_argument("--lra-table", action="store_true", help="after the variants, `lra bench "
                      "--lra-table` at LRA's batch 32 within the budget, into lra_table.json|md")
  parser.add_argument("--against", nargs="*", type=Path, metavar="CLONE", help="after the "
                      "variants, `lra bench --against`'s cases within the budget (the softmax "
                      "ones need no clone), into against.json|md")
  args = parser.parse_args(argv)
  args.argv = list(sys.argv[1:] if argv is None else argv)
  unknown = set((args.variants or "").split(",")) - {v[0] for v in VARIANTS} - {""}
  if unknown:
    parser.error(f"--variants: expected some of {','.join(v[0] for v in VARIANTS)}, found "
                 f"{','.join(sorted(unknown))}")
  return args


def main(argv: list[str] | None = None) -> int:
  args = parse_args(argv)
  report = run_probe(args)
  print(f"report: {args.out / 'step_probe.md'}")
  return 0 if any(r.get("status") == "ok" for r in report["variants"]) else 1


if __name__ == "__main__":
  sys.exit(main())
