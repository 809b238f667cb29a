"""`lra bench --epoch TASK`: one training epoch on the prepared data under fixed padding, per-batch
padding and length bucketing, with the number of programs XLA compiles for each.

Every mode's epoch is planned exactly as training plans it (tasks.contract.batches.epoch_plan).
By default a few steps are timed at each batch length and the epoch time is the sum over its
batches of their length's median (the step time depends on the shape, not on the tokens);
`--full-epoch` times every step instead. The modes are timed interleaved, so a change in the
machine's load touches them alike.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import jax
import numpy as np

from lra import errors, run, train, writers
from lra.bench_common import compiled_flops, device_name, recorded_command
from lra.config_loading import resolve_config
from lra.models.build import execution_path
from lra.tasks.contract.batches import Batching, epoch_plan, example_lengths, make_batch

MODES = ("fixed", "batch", "bucketing")


def mode_batching(mode: str, quantum: int) -> Batching:
  """fixed: pad to the task's T; batch: to each batch's longest; bucketing: batch + buckets."""
  if mode not in MODES:
    raise errors.BadValue(f"Unknown batching mode '{mode}'. Valid modes: {', '.join(MODES)}")
  if mode == "fixed":
    return Batching()
  return Batching(padding="batch", quantum=quantum, bucketing=mode == "bucketing")


def epoch_bench(task: str, mixer: str, *, preset: str = "paper", overrides: Sequence[str] = (),
                data_dir: Path | None = None, modes: Sequence[str] = MODES,
                quantum: int | None = None, steps: int = 3, full: bool = False,
                log=lambda msg: None) -> dict[str, Any]:
  """Times epoch 0 of `task`'s training split under each batching mode.

  Args:
    task, mixer, preset, overrides: the run's config, as `lra run` resolves it.
    data_dir: the prepared data root (default $LRA_DATA_DIR or ~/.cache/lra).
    modes: a subset of MODES.
    quantum: the per-batch padding quantum (default: the config's data.pad_quantum).
    steps: timed steps per batch length (median; after one untimed step), unless `full`.
    full: time every step of every mode's epoch.
  Returns:
    {"setup": what ran, "modes": [one record per mode]}.
  """
  config = resolve_config(task, mixer, preset, overrides)
  data = run.load_data(config, data_dir or run.default_data_dir(), log=log)
  spec, arrays, tc = data.spec, data.split("train"), config.train
  quantum = quantum or config.data.pad_quantum
  lengths = example_lengths(arrays, spec)
  plans = {}
  for mode in modes:
    batching = mode_batching(mode, quantum)
    batching.check(spec.seq_len)
    plans[mode] = epoch_plan(lengths, spec, tc.batch_size, tc.seed, 0, batching)
  s = train.setup(config, spec)
  state = train.init_state(s, spec, tc.seed)
  start, stop = s.put.rows(tc.batch_size)

  def placed(mode: str, index: int):
    plan, padded = plans[mode]
    return s.put(make_batch(arrays, plan[index][start:stop], spec, length=int(padded[index])),
                 tc.batch_size)

  # One program per batch length, as jit compiles them in training.
  first_of = {}
  for mode, (_, padded) in plans.items():
    for index, t in enumerate(padded):
      first_of.setdefault(int(t), (mode, index))
  programs, compile_s, flops = {}, {}, {}
  for t in sorted(first_of):
    batch = placed(*first_of[t])
    began = time.perf_counter()
    programs[t] = s.train_step.lower(state, batch).compile()
    compile_s[t] = time.perf_counter() - began
    flops[t] = compiled_flops(programs[t])
    state, sums = programs[t](state, batch)  # the untimed first call
    jax.block_until_ready(sums)
    log(f"T={t}: compiled in {compile_s[t]:.1f}s")

  def timed(mode: str, index: int) -> float:
    """One training step as the loop runs it: gather the rows, place them, step."""
    nonlocal state
    began = time.perf_counter()
    batch = placed(mode, index)
    state, sums = programs[int(plans[mode][1][index])](state, batch)
    jax.block_until_ready(sums)
    return time.perf_counter() - began

  if full:
    totals = {mode: 0.0 for mode in modes}
    for index in range(len(plans[modes[0]][1])):
      for mode in modes:  # interleaved, step by step
        totals[mode] += timed(mode, index)
      if index % 100 == 0:
        log(f"step {index}: " + ", ".join(f"{m} {v:.1f}s" for m, v in totals.items()))
    per_shape = {}
  else:
    samples = {t: [] for t in first_of}
    cursor = {t: 0 for t in first_of}
    by_length = {t: [(m, int(i)) for m in modes for i in np.flatnonzero(plans[m][1] == t)]
                 for t in first_of}
    for _ in range(steps):
      for t in sorted(first_of):  # round robin over the lengths
        mode, index = by_length[t][cursor[t] % len(by_length[t])]
        cursor[t] += 1
        samples[t].append(timed(mode, index))
    per_shape = {t: statistics.median(v) for t, v in samples.items()}
    log("step s by T: " + ", ".join(f"{t}: {v:.3f}" for t, v in sorted(per_shape.items())))
    totals = {mode: float(sum(per_shape[int(t)] for t in plans[mode][1])) for mode in modes}

  records = []
  for mode in modes:
    plan, padded = plans[mode]
    shapes = sorted({int(t) for t in padded})
    real = float(np.minimum(lengths[plan], padded[:, None]).sum())
    work = [flops[int(t)] for t in padded]
    records.append({
        "mode": mode, "batching": dataclasses.asdict(mode_batching(mode, quantum)),
        "steps": len(padded), "compiles": len(shapes), "lengths": shapes,
        "length_counts": {str(t): int((padded == t).sum()) for t in shapes},
        "compile_s": sum(compile_s[t] for t in shapes), "mean_len": float(padded.mean()),
        "pad_fraction": 1.0 - real / float(padded.sum() * plan.shape[1]),
        "epoch_s": totals[mode], "estimated": not full,
        "flops_per_s": (sum(work) / totals[mode] if None not in work else None)})
  base = next((r["epoch_s"] for r in records if r["mode"] == "fixed"), None)
  for r in records:
    r["speedup_vs_fixed"] = base / r["epoch_s"] if base else None
  return {"setup": {
      "task": task, "mixer": mixer, "preset": preset, "overrides": list(overrides),
      "device": device_name(jax.devices()[0]),
      "num_devices": jax.device_count(), "xla_flags": os.environ.get("XLA_FLAGS", ""),
      "num_examples": len(lengths), "seq_len": spec.seq_len,
      "length_min": int(lengths.min()), "length_mean": float(lengths.mean()),
      "length_max": int(lengths.max()), "batch_size": tc.batch_size, "quantum": quantum,
      "num_layers": config.model.num_layers, "dim": config.model.dim,
      "dtype": config.model.dtype, "timed_steps_per_length": None if full else steps,
      "execution_path": execution_path(config),
      "step_s_by_length": {str(t): v for t, v in sorted(per_shape.items())}},
      "modes": records}


def markdown(result: dict[str, Any], command: str, sha: str | None = None) -> str:
  """The epoch table with what ran and how the times were taken."""
  u = result["setup"]
  how = (f"estimated: {u['timed_steps_per_length']} timed steps per batch length (median), "
         "times that length's batches in the epoch; `--full-epoch` times every step"
         if u["timed_steps_per_length"] else "measured: every step of the epoch")
  lines = [
      "# One training epoch per batching mode", "",
      f"Generated by `{command}` on {u['device']} at "
      f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, git "
      f"{sha or writers.git_sha()}" + (f", XLA_FLAGS={u['xla_flags']}" if u["xla_flags"] else "")
      + ".", "",
      f"{u['task']} train: {u['num_examples']} examples of {u['length_min']}-{u['length_max']} "
      f"tokens (mean {u['length_mean']:.0f}) in T={u['seq_len']}; {u['mixer']}, preset "
      f"{u['preset']}" + (f" with {' '.join(u['overrides'])}" if u["overrides"] else "")
      + f": {u['num_layers']} layer(s), D={u['dim']}, {u['dtype']}, batch {u['batch_size']}; "
      f"quantum {u['quantum']}. Epoch time {how}; compile time apart.", "",
      "| mode | steps | compiles | compile s | mean T | pads % | epoch s | speed-up vs fixed "
      "| GFLOP/s |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
  for r in result["modes"]:
    lines.append(
        f"| {r['mode']} | {r['steps']} | {r['compiles']} | {r['compile_s']:.1f} | "
        f"{r['mean_len']:.0f} | {100 * r['pad_fraction']:.1f} | {r['epoch_s']:.1f} | "
        + ("-" if r["speedup_vs_fixed"] is None else f"{r['speedup_vs_fixed']:.2f}") + " | "
        + ("-" if r["flops_per_s"] is None else f"{r['flops_per_s'] / 1e9:.1f}") + " |")
  return "\n".join(lines) + "\n"


def main(args, overrides: Sequence[str]) -> int:
  """`lra bench --epoch TASK`: the table on stdout; --json and --md write it too."""
  command = recorded_command()
  mixers = args.mixers.split(",") if args.mixers else ["latte"]
  modes = args.modes.split(",")
  for mode in modes:
    mode_batching(mode, 1)  # unknown modes fail before any data is read
  log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
  sha = writers.git_sha()
  results = [epoch_bench(args.epoch, mixer, preset=args.preset, overrides=overrides,
                         data_dir=args.data_dir, modes=modes, quantum=args.quantum,
                         steps=args.steps, full=args.full_epoch, log=log) for mixer in mixers]
  text = "\n".join(markdown(r, command, sha) for r in results)
  print(text)
  for path, body in ((args.json, json.dumps(results, indent=1) + "\n"), (args.md, text)):
    if path:
      Path(path).parent.mkdir(parents=True, exist_ok=True)
      Path(path).write_text(body)
  return 0
