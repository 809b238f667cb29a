"""`lra bench --epoch TASK`: one training epoch on the prepared data under fixed padding, per-batch
padding, sorted micro-batches (k = 2, 4, 8, ...) and length bucketing, with the tokens each
computes and the number of programs XLA compiles for each.

Every mode's epoch is planned exactly as training plans it (tasks.contract.batches.epoch_plan) and
its steps run the programs training runs (lra.training.train.TrainStep: one program per batch, or
one per micro-batch and an update). By default a few calls of each program shape are timed and the
epoch time is the sum over its steps of their programs' medians (the time depends on the shape, not
on the tokens); `--sample-steps N` times N whole steps of each mode instead (the same step indices,
evenly spread over the epoch) and `--full-epoch` every step. Modes are timed interleaved, so a
change in the machine's load touches them alike.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
import re
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from lra import errors
from lra.runs import writers
from lra.training import train
from lra.bench.common import compiled_flops, device_name, recorded_command, write_outputs
from lra.runs.config_loading import default_data_dir, load_data, resolve_config
from lra.models.build import execution_path
from lra.tasks.contract.batches import Batching, epoch_plan, example_lengths, make_batch

MODES = ("fixed", "batch", "sorted2", "sorted4", "sorted8", "bucketing")
_SORTED = re.compile(r"sorted([1-9][0-9]*)")


def mode_batching(mode: str, quantum: int) -> Batching:
  """fixed: pad to the task's T; batch: to each batch's longest; sortedK: the batch's rows by
  length in K micro-batches, each padded to its own longest; bucketing: batch + buckets."""
  k = _SORTED.fullmatch(mode)
  if mode not in ("fixed", "batch", "bucketing") and not k:
    raise errors.BadValue(f"Unknown batching mode '{mode}'. Valid modes: fixed, batch, sortedK "
                          f"(K micro-batches, e.g. sorted4), bucketing")
  if mode == "fixed":
    return Batching()
  if k:
    return Batching(padding="sorted", quantum=quantum, micro_batches=int(k.group(1)))
  return Batching(padding="batch", quantum=quantum, bucketing=mode == "bucketing")


class _Programs:
  """The compiled programs of a training step, one per shape, each compiled once (AOT, so that
  compile time is measured apart): `whole` per (B, T), `acc` per (B/k, T), one `update`."""

  def __init__(self, s: train.Setup, state, log):
    self.s, self.state, self.log = s, state, log
    self.compiled: dict[tuple, Any] = {}
    self.compile_s: dict[tuple, float] = {}
    self.flops: dict[tuple, float | None] = {}
    self.total = None  # a summed gradient, for the accumulating and updating programs

  def _compile(self, key: tuple, lowered) -> Any:
    if key not in self.compiled:
      began = time.perf_counter()
      self.compiled[key] = lowered().compile()
      self.compile_s[key] = time.perf_counter() - began
      self.flops[key] = compiled_flops(self.compiled[key])
      self.log(f"{key}: compiled in {self.compile_s[key]:.1f}s")
    return self.compiled[key]

  def run(self, key: tuple, batch=None) -> None:
    """One call of program `key` ("whole", rows, T), ("acc", rows, T) or ("update",)."""
    step = self.s.train_step
    if self.total is None:
      self.total = step.zeros(self.state.params, False)
    if key[0] == "whole":
      program = self._compile(key, lambda: step.whole.lower(self.state, batch))
      self.state, out = program(self.state, batch)
    elif key[0] == "acc":
      program = self._compile(key, lambda: step.accumulate.lower(
          self.total, self.state.params, batch, self.state.step, np.int32(0)))
      self.total = out = program(self.total, self.state.params, batch, self.state.step,
                                 np.int32(0))
    else:  # the update, and the zeros a step starts its sum from
      program = self._compile(key, lambda: step.update.lower(self.state, self.total))
      self.state, out = program(self.state, self.total)
      self.total = step.zeros(self.state.params, False)
      out = (out, self.total)
    jax.block_until_ready(out)


def _step_keys(batching: Batching, rows: int, padded: np.ndarray) -> list[tuple]:
  """The programs one step runs, in order, given its micro-batches' lengths [k]."""
  if batching.micro_batches == 1:
    return [("whole", rows, int(padded[0]))]
  size = rows // batching.micro_batches
  return [("acc", size, int(t)) for t in padded] + [("update",)]


def epoch_bench(task: str, mixer: str, *, preset: str = "paper", overrides: Sequence[str] = (),
                data_dir: Path | None = None, modes: Sequence[str] = MODES,
                quantum: int | None = None, steps: int = 3, sample_steps: int = 0,
                full: bool = False, log=lambda msg: None) -> dict[str, Any]:
  """Times epoch 0 of `task`'s training split under each batching mode.

  Args:
    task, mixer, preset, overrides: the run's config, as `lra run` resolves it.
    data_dir: the prepared data root (default $LRA_DATA_DIR or ~/.cache/lra).
    modes: fixed, batch, sortedK, bucketing (see `mode_batching`).
    quantum: the per-batch padding quantum (default: the config's data.pad_quantum).
    steps: timed calls per program shape (median; after one untimed call); with
      `sample_steps`, timed rounds over the sampled steps (the median round).
    sample_steps: time this many whole steps of each mode, `steps` rounds of them.
    full: time every step of every mode's epoch.
  Returns:
    {"setup": what ran, "modes": [one record per mode]}.
  """
  config = resolve_config(task, mixer, preset, overrides)
  data = load_data(config, data_dir or default_data_dir(), log=log)
  spec, arrays, tc = data.spec, data.split("train"), config.train
  quantum = quantum or config.data.pad_quantum
  lengths = example_lengths(arrays, spec)
  batchings = {mode: mode_batching(mode, quantum) for mode in modes}
  plans = {}
  for mode, batching in batchings.items():
    batching.check(spec.seq_len)
    plans[mode] = epoch_plan(lengths, spec, tc.batch_size, tc.seed, 0, batching)
  s = train.setup(config, spec)
  programs = _Programs(s, train.init_state(s, spec, tc.seed), log)
  num_steps = len(next(iter(plans.values()))[1])

  def step_keys(mode: str, index: int) -> list[tuple]:
    return _step_keys(batchings[mode], tc.batch_size, plans[mode][1][index])

  def batches(mode: str, index: int) -> list:
    """The step's micro-batches, placed as the training loop places them."""
    plan, padded = plans[mode]
    size = tc.batch_size // batchings[mode].micro_batches
    start, stop = s.put.rows(size)
    return [s.put(make_batch(arrays, plan[index][i * size:(i + 1) * size][start:stop], spec,
                             length=int(t)), size) for i, t in enumerate(padded[index])]

  def timed_step(mode: str, index: int) -> float:
    """One training step as the loop runs it: gather the rows, place them, run its programs."""
    began = time.perf_counter()
    for key, batch in zip(step_keys(mode, index), batches(mode, index) + [None]):
      programs.run(key, batch)
    return time.perf_counter() - began

  if full:
    chosen = list(range(num_steps))
  elif sample_steps:
    chosen = sorted({int(i) for i in np.linspace(0, num_steps - 1, sample_steps)})
  else:
    chosen = list(range(num_steps))  # every shape of the epoch is timed on its own
  uses = {}  # each program shape the timed steps run, and a step that runs it
  for mode in modes:
    for index in chosen:
      for key in step_keys(mode, index):
        uses.setdefault(key, (mode, index))

  def call(key: tuple) -> float:
    mode, index = uses[key]
    batch = (batches(mode, index) + [None])[step_keys(mode, index).index(key)]
    began = time.perf_counter()
    programs.run(key, batch)
    return time.perf_counter() - began

  for key in sorted(uses, key=str):  # compiled and called once before anything is timed
    call(key)
  per_shape: dict[tuple, float] = {}
  if full:
    totals = {mode: 0.0 for mode in modes}
    for index in chosen:
      for mode in modes:  # interleaved, step by step
        totals[mode] += timed_step(mode, index)
      if index % 100 == 0:
        log(f"step {index}: " + ", ".join(f"{m} {v:.1f}s" for m, v in totals.items()))
  elif sample_steps:
    times = {(mode, index): [] for mode in modes for index in chosen}
    for repeat in range(steps):  # rounds over every (step, mode), so load changes touch all alike
      for index in chosen:
        for mode in modes:
          times[mode, index].append(timed_step(mode, index))
      log(f"round {repeat + 1} of {steps}: " + ", ".join(
          f"{m} {sum(times[m, i][-1] for i in chosen):.1f}s" for m in modes))
    totals = {mode: statistics.median(sum(times[mode, i][r] for i in chosen)
                                      for r in range(steps)) * num_steps / len(chosen)
              for mode in modes}
  else:
    samples = {key: [] for key in uses}
    for _ in range(steps):
      for key in sorted(uses, key=str):  # round robin over the shapes
        samples[key].append(call(key))
    per_shape = {key: statistics.median(v) for key, v in samples.items()}
    log("program s by shape: " + ", ".join(f"{k}: {v:.3f}" for k, v in per_shape.items()))
    totals = {mode: float(sum(per_shape[key] for index in range(num_steps)
                              for key in step_keys(mode, index))) for mode in modes}

  records = []
  for mode in modes:
    plan, padded = plans[mode]
    batching = batchings[mode]
    size = tc.batch_size // batching.micro_batches
    keys = sorted({key for index in range(num_steps) for key in step_keys(mode, index)},
                  key=str)
    shapes = sorted({int(t) for t in padded.ravel()})
    micro_lengths = lengths[plan].reshape(num_steps, batching.micro_batches, size)
    real = float(np.minimum(micro_lengths, padded[:, :, None]).sum())
    tokens = float(padded.sum() * size)
    sampled = float(padded[chosen].sum() * size) if sample_steps and not full else None
    work = [sum(programs.flops.get(key) or np.nan for key in step_keys(mode, index))
            for index in range(num_steps)]
    records.append({
        "mode": mode, "batching": dataclasses.asdict(batching),
        "steps": num_steps, "compiles": len(keys) + (1 if batching.micro_batches > 1 else 0),
        "lengths": shapes,
        "length_counts": {str(t): int((padded == t).sum()) for t in shapes},
        "compile_s": sum(programs.compile_s.get(key, 0.0) for key in keys),
        "mean_len": tokens / (num_steps * tc.batch_size), "tokens": tokens,
        "sampled_tokens": sampled,
        "pad_fraction": 1.0 - real / tokens,
        "epoch_s": totals[mode], "steps_per_s": num_steps / totals[mode],
        "estimated": not full,
        "flops_per_s": (float(np.sum(work)) / totals[mode] if np.isfinite(work).all()
                        else None)})
  base = next((r for r in records if r["mode"] == "fixed"), None)
  for r in records:
    r["speedup_vs_fixed"] = base["epoch_s"] / r["epoch_s"] if base else None
    r["tokens_vs_fixed"] = r["tokens"] / base["tokens"] if base else None
    if base and r["sampled_tokens"]:
      r["sampled_tokens_vs_fixed"] = r["sampled_tokens"] / base["sampled_tokens"]
  how = ("every step" if full else
         f"{len(chosen)} sampled steps, the median of {steps} rounds" if sample_steps
         else f"{steps} calls per program shape")
  return {"setup": {
      "task": task, "mixer": mixer, "preset": preset, "overrides": list(overrides),
      "device": device_name(jax.devices()[0]),
      "num_devices": jax.device_count(), "xla_flags": os.environ.get("XLA_FLAGS", ""),
      "cpu_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
      "num_examples": len(lengths), "seq_len": spec.seq_len,
      "length_min": int(lengths.min()), "length_mean": float(lengths.mean()),
      "length_max": int(lengths.max()), "batch_size": tc.batch_size, "quantum": quantum,
      "num_layers": config.model.num_layers, "dim": config.model.dim,
      "dtype": config.model.dtype, "timing": how,
      "timed_steps_per_length": None if full or sample_steps else steps,
      "sampled_steps": list(chosen) if sample_steps and not full else None,
      "execution_path": execution_path(config),
      "program_s_by_shape": {"/".join(map(str, k)): v for k, v in per_shape.items()}},
      "modes": records}


def markdown(result: dict[str, Any], command: str, sha: str | None = None) -> str:
  """The epoch table with what ran and how the times were taken."""
  u = result["setup"]
  timing = u.get("timing") or (f"{u['timed_steps_per_length']} calls per program shape"
                               if u["timed_steps_per_length"] else "every step")
  how = {"every step": "measured: every step of the epoch"}.get(
      timing, f"estimated from {timing} (median per shape, times that shape's calls in the "
      "epoch)" if "shape" in timing else f"estimated from {timing} of each mode (the same step "
      "indices), times the epoch's steps")
  cores = f", {u['cpu_cores']} core(s)" if u.get("cpu_cores") else ""
  lines = [
      "# One training epoch per batching mode", "",
      f"Generated by `{command}` on {u['device']}{cores} at "
      f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, git "
      f"{sha or writers.git_sha()}" + (f", XLA_FLAGS={u['xla_flags']}" if u["xla_flags"] else "")
      + ".", "",
      f"{u['task']} train: {u['num_examples']} examples of {u['length_min']}-{u['length_max']} "
      f"tokens (mean {u['length_mean']:.0f}) in T={u['seq_len']}; {u['mixer']}, preset "
      f"{u['preset']}" + (f" with {' '.join(u['overrides'])}" if u["overrides"] else "")
      + f": {u['num_layers']} layer(s), D={u['dim']}, {u['dtype']}, batch {u['batch_size']}; "
      f"quantum {u['quantum']}. Epoch time {how}; compile time apart. Tokens: rows x padded "
      "length summed over the epoch's (micro-)batches, against fixed padding's"
      + (f" (in brackets: over the sampled steps {u['sampled_steps']})"
         if u.get("sampled_steps") else "") + ".", "",
      "| mode | steps | compiles | compile s | mean T | tokens | pads % | epoch s | steps/s "
      "| speed-up vs fixed | GFLOP/s |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
  for r in result["modes"]:
    tokens = r.get("tokens_vs_fixed")
    tokens = "-" if tokens is None else f"{tokens:.2f}" + (
        f" ({r['sampled_tokens_vs_fixed']:.2f})" if r.get("sampled_tokens_vs_fixed") else "")
    lines.append(
        f"| {r['mode']} | {r['steps']} | {r['compiles']} | {r['compile_s']:.1f} | "
        f"{r['mean_len']:.0f} | {tokens} | "
        f"{100 * r['pad_fraction']:.1f} | {r['epoch_s']:.1f} | "
        f"{r['steps'] / r['epoch_s']:.3g} | "
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
                         steps=args.steps, sample_steps=args.sample_steps or 0,
                         full=args.full_epoch, log=log) for mixer in mixers]
  text = "\n".join(markdown(r, command, sha) for r in results)
  print(text)
  write_outputs(results, text, json_path=args.json, md_path=args.md)
  return 0
