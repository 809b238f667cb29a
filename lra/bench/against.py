"""`lra bench --against [CLONE ...]`: our layers beside the ones users would run instead.

Per case, our layer and a reference (lra.bench.reference_layers) on the same shapes, dtype and
device: first the check that both compute the same function on shared weights (outputs, input
gradients and parameter gradients, our weights mapped onto the reference's names), then the time
of the jitted forward + backward (the gradient of <y, c> for a fixed random c), the two taking
turns round by round (medians and spread), and XLA's memory analysis of each compiled program.
A case whose check fails is not timed.
"""
from __future__ import annotations

import dataclasses
import datetime
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lra import errors
from lra.bench import reference_layers as refs
from lra.bench.common import (compiled_flops, device_name, recorded_command, write_block,
                              write_outputs)
from lra.machine import memory
from lra.runs import writers

# Outputs and gradients may differ by float rounding only: this much of the largest magnitude.
TOLERANCE = 1e-4
CHECKED = ("the reference's own layer against ours on the same weights (ours mapped onto its "
           "names): outputs, input gradients and parameter gradients")
# Our layers against the authors' at the papers' shapes: at least this much faster, and no more
# memory (issue 70).
GOAL_SPEEDUP = 1.3


@dataclasses.dataclass(frozen=True)
class Case:
  """One comparison. `dims`: D (dim), H (heads), T (seq_len) and the layer's own sizes (L latents,
  or S5's state size P and blocks J); `paper_batch`: the batch of the paper the shapes come from."""
  name: str
  kind: str          # "latte", "s5" (need a clone) or "softmax_flax", "softmax_jax"
  dims: dict[str, int]
  paper_batch: int
  source: str


LISTOPS = dict(dim=128, num_heads=4, seq_len=2000)   # Latte paper, ListOps (batch 64)
TEXT = dict(dim=256, num_heads=4, seq_len=4000)      # Latte paper, Text (batch 32)
_LATTE_SRC = "Latte paper ListOps: D=128, H=4, L=40, T=2000, batch 64"
_TEXT_SRC = "Latte paper Text: D=256, H=4, T=4000, batch 32"
# S5: its run_train.py defaults (P=256 in J=8 blocks), our s5 mixer's; it has no heads.
_S5 = dict(state_size=256, blocks=8)


def _no_heads(dims: dict[str, int]) -> dict[str, int]:
  return {k: v for k, v in dims.items() if k != "num_heads"}


CASES = {c.name: c for c in (
    Case("latte_listops", "latte", {**LISTOPS, "num_latents": 40}, 64, _LATTE_SRC),
    Case("latte_text", "latte", {**TEXT, "num_latents": 40}, 32, _TEXT_SRC + ", L=40 (Table 4)"),
    Case("latte_text_l256", "latte", {**TEXT, "num_latents": 256}, 32,
         _TEXT_SRC + ", L=256 (the authors' configs: imdb)"),
    Case("s5_listops", "s5", {**_no_heads(LISTOPS), **_S5}, 64,
         "Latte paper ListOps shapes, S5's P and J"),
    Case("s5_text", "s5", {**_no_heads(TEXT), **_S5}, 32, "Latte paper Text shapes, S5's P and J"),
    Case("softmax_flax_listops", "softmax_flax", LISTOPS, 64, "Latte paper ListOps shapes"),
    Case("softmax_jax_listops", "softmax_jax", LISTOPS, 64, "Latte paper ListOps shapes"),
    Case("softmax_flax_text", "softmax_flax", TEXT, 32, "Latte paper Text shapes"),
    Case("softmax_jax_text", "softmax_jax", TEXT, 32, "Latte paper Text shapes"),
)}


def make_pair(case: Case, clones: Sequence[Path]) -> refs.Pair | None:
  """The case's pair of layers, or None when its reference needs a clone that was not named."""
  d = case.dims
  if case.kind.startswith("softmax_"):
    return refs.softmax_pair(case.kind.split("_")[1], d["dim"], d["num_heads"], d["seq_len"])
  clone = refs.find_clone(case.kind, clones)
  if clone is None:
    return None
  if case.kind == "latte":
    return refs.latte_pair(clone, d["dim"], d["num_heads"], d["num_latents"], d["seq_len"])
  return refs.s5_pair(clone, d["dim"], d["state_size"], d["blocks"], d["seq_len"])


def inputs(batch: int, seq_len: int, dim: int, masked: bool, seed: int = 0
           ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """x [B,T,D], mask [B,T] and the cotangent c [B,T,D] the backward pass starts from. With
  `masked`, row b ends in pads after (1 - b / (2B)) T real tokens, so pads are exercised."""
  kx, kc = jax.random.split(jax.random.PRNGKey(seed))
  x = jax.random.normal(kx, (batch, seq_len, dim), jnp.float32)
  lengths = np.full(batch, seq_len)
  if masked:
    lengths = np.maximum(1, (seq_len * (1 - np.arange(batch) / (2 * batch))).astype(int))
  mask = jnp.asarray(np.arange(seq_len)[None, :] < lengths[:, None])
  return x, mask, jax.random.normal(kc, (batch, seq_len, dim), jnp.float32)


def _loss_and_grads(apply: Callable) -> Callable:
  """(params, x, mask, c) -> (<apply(params, x, mask), c>, (d params, d x)), jitted."""
  def loss(params, x, mask, c):
    return jnp.vdot(apply(params, x, mask), c)
  return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))


def _output_and_grads(apply: Callable) -> Callable:
  """(params, x, mask, c) -> (y, (d params, d x)) of <y, c>, jitted as one program."""
  def run(params, x, mask, c):
    y, pullback = jax.vjp(lambda p, u: apply(p, u, mask), params, x)
    return y, pullback(c)
  return jax.jit(run)


def check(pair: refs.Pair, x: jax.Array, mask: jax.Array, c: jax.Array) -> dict[str, Any]:
  """Do both layers compute the same function on shared weights? Outputs, d x and d params (ours
  mapped by the same map as the weights), in full f32 matmul precision so that a TPU's or GPU's
  reduced-precision default is not mistaken for a mapping error."""
  params = pair.init(jax.random.PRNGKey(0))
  theirs = pair.to_theirs(params)
  own = pair.init_theirs(jax.random.PRNGKey(0), x[:1, :8], mask[:1, :8])
  layout = jax.tree.map(lambda a: a.shape, own) == jax.tree.map(lambda a: a.shape, theirs)
  with jax.default_matmul_precision("highest"):
    y_ours, (dp_ours, dx_ours) = _output_and_grads(pair.ours)(params, x, mask, c)
    y_theirs, (dp_theirs, dx_theirs) = _output_and_grads(pair.theirs)(theirs, x, mask, c)
  found = {"layout_matches": bool(layout)}
  for what, a, b in (("output", y_ours, y_theirs), ("input_grad", dx_ours, dx_theirs),
                     ("param_grad", pair.to_theirs(dp_ours), dp_theirs)):
    diff = max(float(jnp.max(jnp.abs(u - v))) for u, v in zip(jax.tree.leaves(a),
                                                               jax.tree.leaves(b)))
    scale = max(float(jnp.max(jnp.abs(v))) for v in jax.tree.leaves(b))
    found[f"{what}_max_abs_diff"], found[f"{what}_max_abs"] = diff, scale
  found["same_function"] = layout and all(
      found[f"{w}_max_abs_diff"] <= TOLERANCE * max(found[f"{w}_max_abs"], 1e-30)
      for w in ("output", "input_grad", "param_grad"))
  # What was compared, kept with the verdict: the tests without a clone check the maps against
  # formulas only, so a record is the one trace of a check against the third-party layer.
  found.update(compared=CHECKED, tolerance=TOLERANCE, matmul_precision="highest",
               inputs=list(x.shape))
  return found


def time_interleaved(calls: dict[str, Callable[[], Any]], rounds: int, per_round: int
                     ) -> dict[str, dict[str, Any]]:
  """Wall time of each zero-argument call (waited for), the calls taking turns: every round runs
  each `per_round` times, the order reversed every other round so neither always goes first.

  Returns:
    per name: median_ms, q1_ms, q3_ms, min_ms, max_ms over all calls and round_ms (each round's
    median), so a ratio can also be taken round by round.
  """
  names = list(calls)
  times: dict[str, list[float]] = {n: [] for n in names}
  rounds_ms: dict[str, list[float]] = {n: [] for n in names}
  for r in range(rounds):
    for name in (names if r % 2 == 0 else names[::-1]):
      mine = []
      for _ in range(per_round):
        start = time.perf_counter()
        jax.block_until_ready(calls[name]())
        mine.append(1e3 * (time.perf_counter() - start))
      times[name] += mine
      rounds_ms[name].append(statistics.median(mine))
  found = {}
  for name in names:
    q1, _, q3 = statistics.quantiles(times[name], n=4) if len(times[name]) > 1 else [
        times[name][0]] * 3
    found[name] = {"median_ms": statistics.median(times[name]), "q1_ms": q1, "q3_ms": q3,
                   "min_ms": min(times[name]), "max_ms": max(times[name]),
                   "round_ms": rounds_ms[name]}
  return found


def _compiled(apply: Callable, params, x, mask, c) -> tuple[Any, dict[str, Any]]:
  start = time.perf_counter()
  compiled = _loss_and_grads(apply).lower(params, x, mask, c).compile()
  mem = compiled.memory_analysis()
  return compiled, {"compile_s": time.perf_counter() - start,
                    "peak_bytes": memory.step_bytes(compiled),
                    "temp_bytes": None if mem is None else int(mem.temp_size_in_bytes),
                    "flops": compiled_flops(compiled)}


def run_case(case: Case, clones: Sequence[Path], batch: int | None = None, *, rounds: int = 5,
             per_round: int = 3) -> dict[str, Any]:
  """One record: the check, then (if it passes) time and memory of both sides; `batch`: rows per
  call (default: the paper's)."""
  dims = case.dims
  batch = batch or case.paper_batch
  record = _record(case, batch)
  pair = make_pair(case, clones)
  if pair is None:
    marker, url = refs.CLONES[case.kind]
    record["status"] = f"not run: no clone of {url} among --against"
    return record
  record.update(reference=pair.reference, masked=pair.masked)
  clone = refs.find_clone(case.kind, clones) if case.kind in refs.CLONES else None
  if clone is not None:  # which version of the third-party code the check ran
    record["clone"] = {"path": str(clone), "commit": writers.git_sha(clone)}
  x, mask, c = inputs(batch, dims["seq_len"], dims["dim"], pair.masked)
  record["check"] = check(pair, x, mask, c)
  if not record["check"]["same_function"]:
    record["status"] = "differs: not timed"
    return record
  params = pair.init(jax.random.PRNGKey(0))
  sides = {"ours": (pair.ours, params), "theirs": (pair.theirs, pair.to_theirs(params))}
  calls = {}
  for side, (apply, p) in sides.items():
    compiled, record[side] = _compiled(apply, p, x, mask, c)
    calls[side] = lambda compiled=compiled, p=p: compiled(p, x, mask, c)
    jax.block_until_ready(calls[side]())  # warm-up: first-call allocations stay out of the times
  timed = time_interleaved(calls, rounds, per_round)
  for side in sides:
    record[side].update(timed[side])
  ours, theirs = record["ours"], record["theirs"]
  per_round_ratio = [t / o for o, t in zip(ours["round_ms"], theirs["round_ms"])]
  record.update(status="ok", speedup=theirs["median_ms"] / ours["median_ms"],
                speedup_round_min=min(per_round_ratio), speedup_round_max=max(per_round_ratio),
                memory_ratio=_ratio(ours["peak_bytes"], theirs["peak_bytes"]),
                temp_ratio=_ratio(ours["temp_bytes"], theirs["temp_bytes"]),
                rounds=rounds, per_round=per_round)
  return record


def _record(case: Case, batch: int) -> dict[str, Any]:
  return {"case": case.name, "kind": case.kind, "dims": case.dims, "batch_size": batch,
          "paper_batch": case.paper_batch, "source": case.source, "dtype": "float32",
          "device": device_name(jax.devices()[0])}


def run_cases(cases: Sequence[Case], clones: Sequence[Path], batch: int | None = None, *,
              rounds: int = 5, per_round: int = 3, deadline: float | None = None,
              log=None) -> list[dict[str, Any]]:
  """run_case for each case; one that fails is a record saying why, and once `deadline` (a
  time.monotonic() value) has passed the rest are `not run: out of time`."""
  records = []
  for case in cases:
    if deadline is not None and time.monotonic() > deadline:
      record = {**_record(case, batch or case.paper_batch), "status": "not run: out of time"}
    else:
      try:
        record = run_case(case, clones, batch, rounds=rounds, per_round=per_round)
      except Exception as error:  # noqa: BLE001 - one case's failure must not lose the others
        record = {**_record(case, batch or case.paper_batch),
                  "status": f"failed: {type(error).__name__}: {str(error).splitlines()[0][:200]}"}
    records.append(record)
    if log:
      log(f"{record['case']:<22} {record['status']}" + (
          f"  {record['speedup']:.2f}x  memory {_n(record['memory_ratio'], '.3f')}"
          if record["status"] == "ok" else ""))
  return records


def shrink(case: Case) -> Case:
  """The case at a size that runs in seconds (tests, `tools/step_probe.py --quick`)."""
  own = {"num_latents": 4} if "num_latents" in case.dims else (
      {"state_size": 8, "blocks": 2} if "state_size" in case.dims else {})
  heads = {"num_heads": 2} if "num_heads" in case.dims else {}
  return dataclasses.replace(case, dims={**case.dims, "dim": 8, "seq_len": 16, **heads, **own},
                             paper_batch=2)


def _ratio(a, b) -> float | None:
  return a / b if a is not None and b else None


def select_cases(names: str | None, clones: Sequence[Path]) -> list[Case]:
  """--cases (comma-separated names, or kinds such as `latte`), default: every case."""
  if not names:
    return list(CASES.values())
  chosen = []
  for name in names.split(","):
    found = [c for c in CASES.values() if name in (c.name, c.kind, c.kind.split("_")[0])]
    if not found:
      raise errors.UnknownName(f"--cases {name}: expected case names or kinds among "
                               f"{', '.join(CASES)}, e.g. --cases latte,softmax_flax_listops")
    chosen += [c for c in found if c not in chosen]
  return chosen


# ---------------------------------------------------------------------------------------------
# Reports.

def _n(x, fmt: str, scale: float = 1.0) -> str:
  return "-" if x is None else format(x * scale, fmt)


def _shape(r: dict[str, Any]) -> str:
  d = r["dims"]
  own = (f", L={d['num_latents']}" if "num_latents" in d else
         f", P={d['state_size']}, J={d['blocks']}" if "state_size" in d else "")
  heads = f", H={d['num_heads']}" if "num_heads" in d else ""
  return (f"B={r['batch_size']} (paper {r['paper_batch']}), T={d['seq_len']}, D={d['dim']}"
          f"{heads}{own}")


def _goal(r: dict[str, Any]) -> str:
  if r.get("status") != "ok":
    return "-"
  met = r["speedup"] >= GOAL_SPEEDUP and (r["memory_ratio"] or 0) <= 1.0
  return "met" if met else "not met"


def table(records: list[dict[str, Any]]) -> str:
  """One row per case: the check's differences, both sides' median times (interquartile range),
  the speed-up (its range over rounds), memory and whether the goal is met."""
  lines = ["| case | shapes | reference | max abs diff: output / d input / d params | ours ms "
           "| reference ms | speed-up (rounds) | ours MiB | reference MiB | memory ratio "
           f"| goal ({GOAL_SPEEDUP}x, memory <= 1) |",
           "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
  for r in records:
    if "check" not in r:
      lines.append(f"| {r['case']} | {_shape(r)} | - | {r['status']} |||||||")
      continue
    k = r["check"]
    diffs = " / ".join(_n(k[f"{w}_max_abs_diff"], ".1e")
                       for w in ("output", "input_grad", "param_grad"))
    if r["status"] != "ok":
      lines.append(f"| {r['case']} | {_shape(r)} | {r['reference']} | {diffs} | "
                   f"{r['status']} ||||||")
      continue
    o, t = r["ours"], r["theirs"]
    lines.append(
        f"| {r['case']} | {_shape(r)} | {r['reference']} | {diffs} | "
        f"{o['median_ms']:.1f} ({o['q1_ms']:.1f}-{o['q3_ms']:.1f}) | "
        f"{t['median_ms']:.1f} ({t['q1_ms']:.1f}-{t['q3_ms']:.1f}) | {r['speedup']:.2f} "
        f"({r['speedup_round_min']:.2f}-{r['speedup_round_max']:.2f}) | "
        f"{_n(o['peak_bytes'], '.1f', 2**-20)} | {_n(t['peak_bytes'], '.1f', 2**-20)} | "
        f"{_n(r['memory_ratio'], '.3f')} | {_goal(r)} |")
  return "\n".join(lines)


def provenance(report: dict[str, Any]) -> str:
  r0 = report["records"][0]
  return (f"On {r0['device']}, git {report['git']}, {report['date']}: float32, forward + backward "
          f"jitted, {r0.get('rounds', '-')} interleaved rounds of {r0.get('per_round', '-')} calls "
          "per side (median, interquartile range; the speed-up's range is over rounds' medians). "
          "Memory: XLA's analysis of each compiled program (arguments + outputs + temporaries). "
          "Speed-up and memory ratio: ours against the reference (speed-up > 1: ours faster).")


def make_report(command: str, sha: str, records: list[dict[str, Any]]) -> dict[str, Any]:
  return {"command": command, "git": sha, "records": records,
          "date": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d}"}


def markdown(report: dict[str, Any]) -> str:
  return (f"# Our layers against the references\n\nGenerated by `{report['command']}`. Do not "
          f"edit: re-run the command.\n\n{provenance(report)}\n\n{table(report['records'])}\n")


DOC_MARKERS = ("<!-- lra-against:start -->", "<!-- lra-against:end -->")


def doc_block(report: dict[str, Any] | None, record_path: str) -> str:
  """docs/performance.md's block: the committed record's table, or a line saying none is yet."""
  body = (f"{provenance(report)} Record: [{record_path}]({record_path}).\n\n"
          f"{table(report['records'])}" if report else
          "No record committed yet: the command above writes it and this block.")
  return (f"{DOC_MARKERS[0]}\n<!-- Generated by `lra bench --against ... --readme`; do not edit "
          f"between these markers. -->\n\n{body}\n\n{DOC_MARKERS[1]}")


def main(args, overrides: Sequence[str]) -> int:
  """`lra bench --against`: one line per case, then the table; writes what was asked."""
  if overrides:
    raise errors.BadValue(f"lra bench --against takes no --config overrides (found "
                          f"{' '.join(overrides)}): the layers are built at the cases' shapes; "
                          "pick cases with --cases and rows with --batch.")
  clones = [Path(d) for d in args.against]
  refs.check_clones(clones)
  cases = select_cases(args.cases, clones)
  command, sha = recorded_command(), writers.git_sha()
  records = run_cases(cases, clones, args.batch, rounds=args.rounds, per_round=args.steps,
                      log=lambda line: print(line, file=sys.stderr, flush=True))
  report = make_report(command, sha, records)
  text = markdown(report)
  print(text)
  write_outputs(report, text, json_path=args.json, md_path=args.md)
  if args.readme:
    write_block(args.readme, report, args.json, DOC_MARKERS, doc_block)
  return 0 if all(r["status"] == "ok" or r["status"].startswith("not run") for r in records) else 1
