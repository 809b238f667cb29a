"""`lra bench`: time and memory of the runner's own training step, per mixer and sequence length.

Measures, summarises (ratios vs softmax, fitted exponents, share of the measured matmul peak) and
writes JSON, a Markdown table and a log-log plot. Each record runs in a fresh process by default,
with XLA's own log (the GPU autotuner's included) kept out of the terminal.
"""
from __future__ import annotations

import datetime
import os
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from lra import errors
from lra.machine import memory
from lra.runs import writers
from lra.training import optim
from lra.bench.common import compiled_flops, device_name, recorded_command, write_outputs
from lra.runs.config_loading import mixer_label, resolve_config
from lra.machine.isolated import call_isolated, call_logged, out_of_memory
from lra.models.build import build_model, execution_path
from lra.training.train import create_state, make_steps
from lra.tasks.contract.spec import TaskSpec

# The Latte paper's Text protocol: 6 layers, D=256, 4 heads, MLP 4D, batch 32.
DEFAULTS = dict(dim=256, num_layers=6, num_heads=4, batch_size=32)
DEFAULT_LENGTHS = (1024, 2048, 4096, 8192, 16384)
BASELINE = "softmax"


def bench_config(mixer: str, *, dim: int, num_layers: int, num_heads: int,
                 overrides: Sequence[str] = (), preset: str = "paper") -> ml_collections.ConfigDict:
  """`lra run text MIXER --preset PRESET`'s config at the given sizes, MLP 4D, then `overrides`
  (`a.b=value` strings): the model the runner would train, built by the same function."""
  sizes = [f"model.dim={dim}", f"model.num_layers={num_layers}", f"model.num_heads={num_heads}",
           f"model.mlp_dim={4 * dim}"]
  return resolve_config("text", mixer, preset, [*sizes, *overrides])


def measure(mixer: str, seq_len: int, batch_size: int, *, dim: int, num_layers: int,
            num_heads: int, overrides: Sequence[str] = (), num_steps: int = 5,
            warmup_steps: int = 2, min_time_s: float = 1.0, preset: str = "paper"
            ) -> dict[str, Any]:
  """One record: the median wall time of jitted train steps after `warmup_steps`.

  At least `num_steps` steps are timed, and more until `min_time_s` seconds have passed.

  The step is train.make_steps' (forward, backward, AdamW update, state donated) on a batch of
  B x T random byte tokens, all real. Memory is XLA's analysis of the compiled step: arguments +
  outputs + temporaries, less what donation aliases (deterministic, so comparable across runs).
  """
  config = bench_config(mixer, dim=dim, num_layers=num_layers, num_heads=num_heads,
                        overrides=overrides, preset=preset)
  spec = TaskSpec(vocab_size=257, seq_len=seq_len, num_classes=2)
  device = jax.devices()[0]
  record: dict[str, Any] = {
      "mixer": mixer_label(config), "seq_len": seq_len, "batch_size": batch_size,
      "device": device_name(device), "dim": dim, "num_layers": num_layers,
      "num_heads": num_heads, "overrides": list(overrides), "dtype": config.model.dtype,
      **({"preset": preset} if preset != "paper" else {}),
      "execution_path": execution_path(config),
      "status": "ok", "time_ms": None, "tokens_per_s": None, "peak_bytes": None}
  mesh = jax.sharding.Mesh(np.asarray([device]), ("data",))
  rng = np.random.default_rng(0)
  batch = jax.device_put({
      "inputs": rng.integers(1, 257, (batch_size, seq_len), dtype=np.int32),
      "mask": np.ones((batch_size, seq_len), bool),
      "label": rng.integers(0, 2, (batch_size,), dtype=np.int32),
      "weight": np.ones((batch_size,), np.float32)}, NamedSharding(mesh, P("data")))
  model = build_model(config, spec)
  init_batch = {"inputs": batch["inputs"][:1], "mask": batch["mask"][:1]}
  variables = jax.jit(lambda key: model.init(key, init_batch, deterministic=True))(
      jax.random.PRNGKey(0))
  params = variables["params"]
  state = jax.device_put(create_state(model, variables, optim.make_optimizer(config.train)),
                         NamedSharding(mesh, P()))
  record["num_params"] = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params))
  train_step, _ = make_steps(model, mesh, dropout_seed=0, dropout_bits=config.train.dropout_bits)

  start = time.perf_counter()
  compiled = train_step.lower(state, batch).compile()
  record["compile_s"] = time.perf_counter() - start
  mem = compiled.memory_analysis()
  if mem is not None:
    record.update(
        argument_bytes=int(mem.argument_size_in_bytes), output_bytes=int(mem.output_size_in_bytes),
        temp_bytes=int(mem.temp_size_in_bytes), alias_bytes=int(mem.alias_size_in_bytes))
    record["peak_bytes"] = memory.step_bytes(compiled)
  record["flops"] = compiled_flops(compiled)
  available, _ = memory.device_bytes(device)
  if record["peak_bytes"] and available and record["peak_bytes"] > 0.9 * available:
    record["status"] = (f"skipped: needs {record['peak_bytes'] / 2**30:.1f} GiB, "
                        f"{available / 2**30:.1f} GiB available")
    return record

  times = []
  try:
    for _ in range(warmup_steps):
      state, sums = compiled(state, batch)
      jax.block_until_ready((state, sums))
    # Short steps repeat for at least min_time_s, so their median has enough samples to be stable.
    stop = time.perf_counter() + min_time_s
    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    while len(times) < num_steps or (time.perf_counter() < stop and len(times) < 1000):
      start = time.perf_counter()
      state, sums = compiled(state, batch)
      jax.block_until_ready((state, sums))
      times.append(time.perf_counter() - start)
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
  except Exception as e:  # noqa: BLE001 - an out-of-memory step is a result, not a crash
    detail = out_of_memory(str(e))
    if detail is None:
      raise
    record.update(status="oom", oom_detail=detail)
    return record
  seconds = statistics.median(times)
  record.update(time_ms=1e3 * seconds, time_ms_min=1e3 * min(times),
                time_ms_max=1e3 * max(times), num_timed_steps=len(times),
                tokens_per_s=batch_size * seq_len / seconds)
  record["flops_per_s"] = record["flops"] / seconds if record["flops"] else None
  # CPU seconds per step: page faults of freshly mapped temporaries show as system time.
  record["cpu_user_s"] = (cpu_after.ru_utime - cpu_before.ru_utime) / len(times)
  record["cpu_system_s"] = (cpu_after.ru_stime - cpu_before.ru_stime) / len(times)
  # ru_maxrss is in KiB on Linux; it is this process's peak, so per record only when isolated.
  record["rss_peak_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
  return record


def matmul_peak(num_steps: int = 5, n: int | None = None) -> dict[str, Any]:
  """The device's achievable f32 matmul FLOP/s (the step runs in f32), timed like the step."""
  device = jax.devices()[0]
  n = n or (1024 if device.platform == "cpu" else 8192)
  a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
  matmul = jax.jit(lambda x, y: x @ y)
  jax.block_until_ready(matmul(a, a))
  times = []
  for _ in range(num_steps):
    start = time.perf_counter()
    jax.block_until_ready(matmul(a, a))
    times.append(time.perf_counter() - start)
  return {"matmul_n": n, "matmul_peak_flops_per_s": 2 * n**3 / statistics.median(times),
          "device": device_name(device)}


def _record_job(fn, kwargs, *, isolate: bool, xla_log: Path | None, label: str,
                deadline: float | None) -> tuple[Any, str | None, str | None]:
  """One job of run_bench: isolated (stopped at `deadline`, a time.monotonic() value) or not."""
  if deadline is not None and deadline - time.monotonic() < 1:
    return None, "not run: out of time", None
  if not isolate:
    return call_logged(fn, kwargs, xla_log, label)
  timeout = None if deadline is None else deadline - time.monotonic()
  return call_isolated(fn, kwargs, xla_log=xla_log, label=label, timeout_s=timeout)


def run_bench(mixers: Sequence[str], lengths: Sequence[int], batch_size: int, *, dim: int,
              num_layers: int, num_heads: int, overrides: Sequence[str] = (),
              num_steps: int = 5, warmup_steps: int = 2, min_time_s: float = 1.0,
              isolate: bool = True, matmul_n: int | None = None, log=None,
              xla_log: Path | None = None, deadline: float | None = None,
              by_length: bool = False, preset: str = "paper",
              overrides_for=None) -> list[dict[str, Any]]:
  """Measures every (mixer, T); with `isolate` each in a fresh process.

  A fresh process per record makes peak RSS that record's own, and frees an accelerator fully
  between records. A record that cannot compile or run for lack of memory is `oom` (with
  `oom_detail`, the line that said so); any other failure is `error: ...`; neither stops the
  others. XLA's log goes to `xla_log` (appended), or nowhere.

  Args:
    deadline: a time.monotonic() value; isolated records still running then are stopped
      (`timeout: ...`) and later ones are `not run: out of time`.
    by_length: run every mixer at the first length before any at the next (so a deadline cuts
      lengths, not mixers); the records come back in (mixer, T) order either way.
    preset: the Text preset the configs start from.
    overrides_for: (mixer, T) -> more overrides for that record only (after `overrides`).
  Returns:
    One record per (mixer, T), with the matmul peak and each record's share of it.
  """
  def own(mixer: str, seq_len: int) -> tuple[str, ...]:
    return (*overrides, *(overrides_for(mixer, seq_len) if overrides_for else ()))

  for mixer in mixers:  # unknown mixers and bad overrides fail here, before any process starts
    for seq_len in lengths:
      bench_config(mixer, dim=dim, num_layers=num_layers, num_heads=num_heads,
                   overrides=own(mixer, seq_len), preset=preset)
  order = ([(m, t) for t in lengths for m in mixers] if by_length
           else [(m, t) for m in mixers for t in lengths])
  peak, error, _ = _record_job(matmul_peak, {"num_steps": num_steps, "n": matmul_n},
                               isolate=isolate, xla_log=xla_log, label="matmul peak",
                               deadline=deadline)
  if error and log:
    log(f"matmul peak: {error.splitlines()[0][:200]}")
  peak = (peak or {}).get("matmul_peak_flops_per_s")
  records = {}
  for mixer, seq_len in order:
    kwargs = dict(mixer=mixer, seq_len=seq_len, batch_size=batch_size, dim=dim,
                  num_layers=num_layers, num_heads=num_heads, overrides=own(mixer, seq_len),
                  num_steps=num_steps, warmup_steps=warmup_steps, min_time_s=min_time_s,
                  preset=preset)
    record, error, oom = _record_job(measure, kwargs, isolate=isolate, xla_log=xla_log,
                                     label=f"{mixer} T={seq_len}", deadline=deadline)
    if record is None:  # one failing record should not lose the others
      record = {**kwargs, "overrides": list(kwargs["overrides"]), "device": None, "time_ms": None,
                "tokens_per_s": None, "peak_bytes": None,
                "status": "oom" if oom else error.splitlines()[0][:200]}
      if oom:
        record["oom_detail"] = oom
      elif not record["status"].startswith(("timeout", "not run")):
        record["status"] = "error: " + record["status"]
    record["matmul_peak_flops_per_s"] = peak
    record["fraction_of_matmul_peak"] = (record["flops_per_s"] / peak
                                         if peak and record.get("flops_per_s") else None)
    records[mixer, seq_len] = record
    if log:
      log(format_record(record))
  return [records[m, t] for m in mixers for t in lengths]

def format_record(r: dict[str, Any]) -> str:
  """One line per record (an out-of-memory record with the line that said so)."""
  name = _name(r)
  if r["status"] != "ok":
    detail = f" ({r['oom_detail']})" if r.get("oom_detail") else ""
    return f"{name:<16} T={r['seq_len']:<6} {r['status']}{detail}"
  return (f"{name:<16} T={r['seq_len']:<6} {r['time_ms']:9.1f} ms  "
          f"{r['tokens_per_s']:10.0f} tok/s  {r['peak_bytes'] / 2**20:9.1f} MiB")


def _name(r: dict[str, Any]) -> str:
  """The mixer, with the attention implementation that ran where the mixer names one."""
  return r["mixer"] + (f" [{r['execution_path']}]" if r.get("execution_path") else "")


def _device(records: list[dict[str, Any]]) -> str:
  return next((r["device"] for r in records if r.get("device")), "an unknown device")


def _fit_exponent(points: list[tuple[float, float]]) -> float | None:
  """Slope of log(y) against log(T) over the longer half of the lengths (at least three points).

  Short lengths are dominated by fixed per-step costs, which would flatten every slope.
  """
  points = sorted(points)
  points = points[-max(3, (len(points) + 1) // 2):]
  if len(points) < 2:
    return None
  x, y = np.log([p[0] for p in points]), np.log([p[1] for p in points])
  return float(np.polyfit(x, y, 1)[0])


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
  """Ratios vs softmax per (mixer, T), and per mixer its time and memory exponents.

  Returns:
    {"ratios": [{mixer, seq_len, speedup, memory_ratio}], "mixers": {mixer: {time_exponent,
    memory_exponent, largest_seq_len, speedup, memory_ratio}}} where the last three are at the
    largest T both the mixer and softmax ran.
  """
  ok = [r for r in records if r["status"] == "ok"]
  base = {r["seq_len"]: r for r in ok if r["mixer"] == BASELINE}
  ratios = []
  for r in ok:
    b = base.get(r["seq_len"])
    if b is not None:
      ratios.append({"mixer": r["mixer"], "seq_len": r["seq_len"],
                     "speedup": b["time_ms"] / r["time_ms"],
                     "memory_ratio": r["peak_bytes"] / b["peak_bytes"]})
  mixers = {}
  for name in dict.fromkeys(r["mixer"] for r in records):
    mine = [r for r in ok if r["mixer"] == name]
    shared = [q for q in ratios if q["mixer"] == name]
    last = max(shared, key=lambda q: q["seq_len"]) if shared else {}
    mixers[name] = {
        "time_exponent": _fit_exponent([(r["seq_len"], r["time_ms"]) for r in mine]),
        "memory_exponent": _fit_exponent([(r["seq_len"], r["peak_bytes"]) for r in mine]),
        "largest_ok_seq_len": max((r["seq_len"] for r in mine), default=None),
        "largest_seq_len": last.get("seq_len"), "speedup": last.get("speedup"),
        "memory_ratio": last.get("memory_ratio")}
  return {"ratios": ratios, "mixers": mixers}


def _num(x, fmt: str) -> str:
  return "-" if x is None else format(x, fmt)


def markdown(records: list[dict[str, Any]], command: str, sha: str | None = None) -> str:
  """The generated table: provenance, per-record numbers with ratios, exponents per mixer."""
  summary = summarise(records)
  ratio = {(q["mixer"], q["seq_len"]): q for q in summary["ratios"]}
  r0 = records[0]
  lines = [
      "# Training-step speed and memory per mixer", "",
      f"Generated by `{command}` on {_device(records)} at "
      f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, git "
      f"{sha or writers.git_sha()}. Do not edit: re-run the command.", "",
      f"Model: the shared encoder, {r0['num_layers']} layers, D={r0['dim']}, "
      f"{r0['num_heads']} heads, MLP 4D, batch {r0['batch_size']}"
      + (f", overrides {' '.join(r0['overrides'])}" if r0["overrides"] else "") + ". "
      "Time: median of the timed steps of the jitted train step (forward + backward + AdamW, "
      "state donated), after warm-up. Memory: XLA's analysis of the compiled step (arguments + "
      "outputs + temporaries - donated aliases). Ratios are against softmax at the same length; "
      "speed-up > 1 is faster, memory < 1 is smaller. Matmul peak: f32 "
      f"{(r0.get('matmul_peak_flops_per_s') or 0) / 1e9:.1f} GFLOP/s measured by the bench. CPU s: "
      "process CPU time per step, of which system time in brackets (on CPU mostly the kernel "
      "mapping and zeroing the step's temporaries afresh).", "",
      "| mixer | T | time ms | tokens/s | peak MiB | speed-up vs softmax | memory vs softmax "
      "| GFLOP/s | % of matmul peak | peak RSS MiB | CPU s (system) |",
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
  for r in records:
    q = ratio.get((r["mixer"], r["seq_len"]), {})
    if r["status"] != "ok":
      lines.append(f"| {_name(r)} | {r['seq_len']} | {r['status']} ||||||||| ")
      continue
    frac = r.get("fraction_of_matmul_peak")
    lines.append(
        f"| {_name(r)} | {r['seq_len']} | {r['time_ms']:.1f} | {r['tokens_per_s']:.0f} | "
        f"{r['peak_bytes'] / 2**20:.1f} | {_num(q.get('speedup'), '.2f')} | "
        f"{_num(q.get('memory_ratio'), '.3f')} | "
        f"{_num(r.get('flops_per_s') and r['flops_per_s'] / 1e9, '.1f')} | "
        f"{_num(frac and 100 * frac, '.1f')} | "
        f"{_num(r.get('rss_peak_bytes') and r['rss_peak_bytes'] / 2**20, '.0f')} | "
        + (f"{r['cpu_user_s'] + r['cpu_system_s']:.2f} ({r['cpu_system_s']:.2f}) |"
           if "cpu_user_s" in r else "- |"))
  lines += ["", "Per mixer: exponents of time and memory against T (least squares on log-log over "
            "the longer half of the lengths), and the ratios at the largest T softmax also ran.",
            "",
            "| mixer | time exponent | memory exponent | at T | speed-up vs softmax | "
            "memory vs softmax |", "|---|---:|---:|---:|---:|---:|"]
  for name, s in summary["mixers"].items():
    lines.append(f"| {name} | {_num(s['time_exponent'], '.2f')} | "
                 f"{_num(s['memory_exponent'], '.2f')} | {_num(s['largest_seq_len'], 'd')} | "
                 f"{_num(s['speedup'], '.2f')} | {_num(s['memory_ratio'], '.3f')} |")
  return "\n".join(lines) + "\n"


README_MARKERS = ("<!-- lra-bench:start -->", "<!-- lra-bench:end -->")


def readme_block(records: list[dict[str, Any]], md_path: Path | None,
                 sha: str | None = None) -> str:
  """The README's speed-and-memory block: the per-mixer summary, its provenance and a link."""
  table = markdown(records, "")
  summary = table[table.index("| mixer | time exponent"):].rstrip()
  r0 = records[0]
  link = f" Full table: [{md_path.as_posix()}]({md_path.as_posix()})." if md_path else ""
  return (f"{README_MARKERS[0]}\n<!-- Generated by `lra bench --readme`; do not edit between "
          f"these markers. -->\n\nOn {_device(records)}, git {sha or writers.git_sha()}: "
          f"{r0['num_layers']} layer(s), D={r0['dim']}, batch {r0['batch_size']}, T="
          f"{','.join(str(t) for t in sorted({r['seq_len'] for r in records}))}; ratios at the "
          f"largest T softmax also ran.{link}\n\n{summary}\n\n{README_MARKERS[1]}")


def plot(records: list[dict[str, Any]], path: Path) -> None:
  """Log-log time and memory against T, one line per mixer, with T and T^2 guides."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
  for ax, key, label, scale in ((axes[0], "time_ms", "train step time (ms)", 1.0),
                                (axes[1], "peak_bytes", "compiled step memory (MiB)", 2**-20)):
    for name in dict.fromkeys(r["mixer"] for r in records):
      pts = sorted((r["seq_len"], r[key] * scale) for r in records
                   if r["mixer"] == name and r["status"] == "ok")
      if pts:
        ax.plot(*zip(*pts), marker="o", label=name)
    lengths = sorted({r["seq_len"] for r in records})
    ys = [r[key] * scale for r in records if r["status"] == "ok"]
    if ys and len(lengths) > 1:
      t0, y0 = lengths[0], min(ys)
      for power, style in ((1, ":"), (2, "--")):
        ax.plot(lengths, [y0 * (t / t0) ** power for t in lengths], style, color="grey",
                label=f"~T^{power}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length T")
    ax.set_ylabel(label)
    ax.grid(True, which="both", alpha=0.3)
  axes[0].legend(fontsize=8)
  r0 = records[0]
  fig.suptitle(f"{_device(records)}: {r0['num_layers']} layers, D={r0['dim']}, batch "
               f"{r0['batch_size']}", fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def main(args, overrides: Sequence[str]) -> int:
  """`lra bench`: prints one line per record, then the Markdown table; writes what was asked."""
  mixers = args.mixers.split(",") if args.mixers else all_mixers()
  lengths = parse_lengths(args.lengths) if args.lengths else list(DEFAULT_LENGTHS)
  command = recorded_command()
  if args.xla_log:
    args.xla_log.parent.mkdir(parents=True, exist_ok=True)
    args.xla_log.write_text("")  # each record appends its part
  sizes = {k: getattr(args, a) or DEFAULTS[k] for k, a in (
      ("dim", "dim"), ("num_layers", "layers"), ("num_heads", "heads"), ("batch_size", "batch"))}
  records = run_bench(mixers, lengths, sizes.pop("batch_size"), **sizes, overrides=overrides,
                      num_steps=args.steps,
                      warmup_steps=args.warmup, min_time_s=args.min_time,
                      isolate=not args.in_process,
                      matmul_n=args.matmul_n, xla_log=args.xla_log,
                      log=lambda line: print(line, file=sys.stderr, flush=True))
  sha = writers.git_sha()  # before this command writes tracked files (they would read -dirty)
  table = markdown(records, command, sha)
  print(table)
  write_outputs(records, table, json_path=args.json, md_path=args.md, plot_path=args.plot,
                plot=plot)
  if args.readme:
    from lra.report import tables
    # The link is read from the page's own folder (docs/performance.md -> ../results/bench/...).
    md = Path(os.path.relpath(args.md, Path(args.readme).parent)) if args.md else None
    block = readme_block(records, md, sha)
    args.readme.write_text(tables.splice_readme(args.readme.read_text(), block, args.readme,
                                                README_MARKERS, "lra bench --readme"))
  return 0


def parse_lengths(text: str) -> list[int]:
  """--lengths: comma-separated sequence lengths, each at least 1."""
  lengths = [int(t) if t.strip().isdigit() and int(t) > 0 else 0 for t in text.split(",")]
  if 0 in lengths:
    raise errors.BadValue(f"--lengths {text}: expected sequence lengths >= 1 separated by "
                          "commas, e.g. `lra bench --lengths 1024,2048`")
  return lengths


def all_mixers() -> list[str]:
  from lra.models.mixers import MIXERS
  return [BASELINE] + [m for m in MIXERS if m != BASELINE]
