"""`lra bench --lra-table`: LRA's efficiency table in our runner, beside the published figures.

LRA (Tay et al., arXiv 2011.04006 v1, Table 2) timed its Text model (configs/text.py's `lra`
preset: 4 layers, 4 heads, D=256, MLP 1024, CLS pooling, the LRA code's mixer settings) at batch
32 and T = 1K, 2K, 3K, 4K, and gave steps/s and peak memory per device. We time the same model
with `lra bench`'s step (lra.bench.step_time) for every mixer of that table (the Sparse
Transformer is in LRA's Table 1, not its Table 2), plus Latte, S5, Mega-Chunk and Luna-256 (the
last two as in Mega's Table 2, arXiv 2209.10655, Text at 4K), and set our speed and memory
relative to our softmax beside theirs relative to their Transformer.
The published figures: lra/reference/published_efficiency.csv.
"""
from __future__ import annotations

import csv
import datetime
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lra import errors
from lra.bench import step_time
from lra.bench.common import recorded_command, write_block, write_outputs
from lra.configs.common import lra_reformer_chunk
from lra.runs import writers

MIXERS = ("softmax", "linformer", "reformer", "linear", "performer", "bigbird", "local",
          "sinkhorn", "synthesizer", "latte", "s5", "mega", "luna")
LENGTHS = (1024, 2048, 3072, 4096)
PRESET = "lra"
LRA_SIZES = dict(dim=256, num_layers=4, num_heads=4)  # the preset's; MLP 4D = 1024
LRA_BATCH = 32
PUBLISHED = Path(__file__).resolve().parents[1] / "reference" / "published_efficiency.csv"
LRA_SOURCE, MEGA_SOURCE = "LRA arXiv 2011.04006v1 Table 2", "Mega arXiv 2209.10655 Table 2"


def overrides_for(mixer: str, seq_len: int) -> tuple[str, ...]:
  """Per record: LRA's Reformer cuts every length into 10 chunks (the preset sets the 4K one;
  CLS included), and Mega's Luna row is Luna-256."""
  if mixer == "reformer":
    return (f"mixers.reformer.chunk_len={lra_reformer_chunk(seq_len + 1)}",)
  if mixer == "luna":
    return ("mixers.luna.packed_len=256",)
  return ()


def published(path: Path = PUBLISHED) -> list[dict[str, Any]]:
  """The published rows, numbers as floats (None where the paper gives none). LRA's memory ratios
  are computed from its GB (its table prints only the speed ratio)."""
  with open(path, newline="") as f:
    rows = [{k: (float(v) if v and k in _NUMBERS else v or None) for k, v in row.items()}
            for row in csv.DictReader(f)]
  base = {r["seq_len"]: r for r in rows if r["source"] == LRA_SOURCE and r["mixer"] == "softmax"}
  for r in rows:
    if r["source"] == LRA_SOURCE:
      b = base[r["seq_len"]]
      r["memory_ratio"] = r["memory_gb"] / b["memory_gb"]
      r["speedup_computed"] = r["steps_per_s"] / b["steps_per_s"]
  return rows


_NUMBERS = ("seq_len", "steps_per_s", "speedup", "memory_gb", "memory_ratio", "batch_size")


def ours(records: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, float]]:
  """(mixer, T) -> speedup and memory_ratio against our softmax (lra.bench.step_time)."""
  return {(q["mixer"], q["seq_len"]): q for q in step_time.summarise(records)["ratios"]}


def _cell(x, fmt: str) -> str:
  return "-" if x is None else format(x, fmt)


def table_rows(rows: list[dict[str, Any]]) -> list[tuple[str | None, str | None, str | None]]:
  """(our mixer, LRA's model, Mega's model) per line: our mixers first, then the published models
  we do not have."""
  def model(source: str, mixer: str) -> str | None:
    return next((r["model"] for r in rows if r["source"] == source and r["mixer"] == mixer), None)
  lines = [(m, model(LRA_SOURCE, m), model(MEGA_SOURCE, m)) for m in MIXERS]
  for source in (LRA_SOURCE, MEGA_SOURCE):
    for r in rows:
      line = (None, r["model"], None) if source == LRA_SOURCE else (None, None, r["model"])
      if r["source"] == source and not r["mixer"] and line not in lines:
        lines.append(line)
  return lines


def table(records: list[dict[str, Any]] | None, rows: list[dict[str, Any]]) -> str:
  """Two tables, speed and memory: per line and length our ratio to softmax beside LRA's to its
  Transformer, and Mega's at 4K."""
  mine = ours(records) if records else {}
  lengths = sorted({int(r["seq_len"]) for r in rows if r["source"] == LRA_SOURCE}
                   | {t for _, t in mine})
  find = {(r["source"], r["model"], int(r["seq_len"])): r for r in rows}
  head = " | ".join(f"{t // 1024}K ours | {t // 1024}K LRA" for t in lengths)
  out = []
  # LRA and Mega print speed ratios to one decimal; LRA's memory ratios are computed from its GB.
  for what, key, printed in (("Steps/s", "speedup", ".1f"), ("Peak memory", "memory_ratio", ".2f")):
    out += [f"{what} relative to softmax (ours) and to the Transformer (LRA, Mega):", "",
            f"| mixer | LRA's model | Mega's model | {head} | 4K Mega |",
            "|---|---|---|" + "---:|" * (2 * len(lengths) + 1)]
    for mixer, lra, mega in table_rows(rows):
      cells = []
      for t in lengths:
        cells += [_cell(mine.get((mixer, t), {}).get(key), ".2f"),
                  _cell(find.get((LRA_SOURCE, lra, t), {}).get(key), printed)]
      cells.append(_cell(find.get((MEGA_SOURCE, mega, 4096), {}).get(key), printed))
      out.append(f"| {mixer or '-'} | {lra or '-'} | {mega or '-'} | {' | '.join(cells)} |")
    out.append("")
  if mine:
    out.append(goal(mine, rows, records))
  return "\n".join(out).rstrip()


# The linear-time mixers of LRA's table: ours at 4K should be at least as far ahead of softmax.
LINEAR_TIME = ("linformer", "linear", "performer")


def goal(mine: dict[tuple[str, int], dict[str, float]], rows: list[dict[str, Any]],
         records: list[dict[str, Any]] = ()) -> str:
  """One line: per linear-time mixer, whether our 4K ratios are at least LRA's (speed no lower,
  memory no higher); where the speed is short, what it is made of: XLA's FLOPs against softmax's
  and the rate each ran at (speed-up = FLOP ratio x rate ratio)."""
  at_4k = {r["mixer"]: r for r in rows if r["source"] == LRA_SOURCE and r["seq_len"] == 4096}
  measured = {r["mixer"]: r for r in records if r.get("seq_len") == 4096 and r.get("flops")
              and r.get("flops_per_s")}
  found, parts = [], []
  for m in LINEAR_TIME:
    ours_4k, theirs = mine.get((m, 4096)), at_4k[m]
    if ours_4k is None:
      found.append(f"{m} not measured")
      continue
    met = ours_4k["speedup"] >= theirs["speedup"] and (
        ours_4k["memory_ratio"] <= theirs["memory_ratio"])
    found.append(f"{m} {'met' if met else 'NOT met'} (speed {ours_4k['speedup']:.2f} vs "
                 f"{theirs['speedup']:.1f}, memory {ours_4k['memory_ratio']:.2f} vs "
                 f"{theirs['memory_ratio']:.2f})")
    if ours_4k["speedup"] < theirs["speedup"] and {m, "softmax"} <= measured.keys():
      a, b = measured["softmax"], measured[m]
      rate = b["flops_per_s"] / a["flops_per_s"]
      parts.append(f"{m} {b['flops'] / 1e9:.1f} GFLOP ({a['flops'] / b['flops']:.2f}x fewer) "
                   f"at {b['flops_per_s'] / 1e9:.1f} GFLOP/s ({rate:.2f}x softmax's rate)")
  line = ("Goal (issue 70), the linear-time mixers' ratios at 4K at least LRA's: "
          + "; ".join(found) + ".")
  if parts:
    a = measured["softmax"]
    line += (f" Their speed at 4K, as XLA counts a step: softmax {a['flops'] / 1e9:.1f} GFLOP at "
             f"{a['flops_per_s'] / 1e9:.1f} GFLOP/s; " + "; ".join(parts) + ".")
  return line


def provenance(report: dict[str, Any] | None) -> str:
  theirs = (f"LRA: {LRA_SOURCE}, byte-level Text, batch {LRA_BATCH}, 4x4 TPU v3, memory per "
            f"device; Mega: {MEGA_SOURCE}, Text at 4K relative to its own Transformer (device not "
            "stated; its Reformer, Linformer, BigBird and Performer ratios are LRA's at 4K).")
  if not report:
    return f"Ours: no record committed yet. {theirs}"
  r0 = next(r for r in report["records"] if r.get("device")) if any(
      r.get("device") for r in report["records"]) else report["records"][0]
  return (f"Ours: {r0.get('device') or 'an unknown device'}, git {report['git']}, "
          f"{report['date']}: configs/text.py's `lra` preset ({r0['num_layers']} layers, "
          f"D={r0['dim']}, {r0['num_heads']} heads, MLP {4 * r0['dim']}), batch "
          f"{r0['batch_size']}, the training step's median time and XLA's memory of the compiled "
          f"step (lra bench). {theirs}")


DOC_MARKERS = ("<!-- lra-table:start -->", "<!-- lra-table:end -->")


def doc_block(report: dict[str, Any] | None, record_path: str) -> str:
  """docs/performance.md's block: provenance, the two tables and (when the record names one) the
  plot, which lies beside the record."""
  record = f" Record: [{record_path}]({record_path})." if report else ""
  body = table(report["records"] if report else None, published())
  if report and report.get("plot"):
    image = (Path(record_path).parent / Path(report["plot"]).name).as_posix()
    body += f"\n\n![ours and the published, speed and memory against T]({image})"
  return (f"{DOC_MARKERS[0]}\n<!-- Generated by `lra bench --lra-table ... --readme`; do not "
          f"edit between these markers. -->\n\n{provenance(report)}{record}\n\n{body}\n\n"
          f"{DOC_MARKERS[1]}")


def markdown(report: dict[str, Any]) -> str:
  return (f"# LRA's efficiency table, ours beside the published\n\nGenerated by "
          f"`{report['command']}`. Do not edit: re-run the command.\n\n{provenance(report)}\n\n"
          f"{table(report['records'], published())}\n\nEvery record:\n\n"
          + step_time.markdown(report["records"], report["command"], report["git"])
          .split("\n\n", 2)[2])


def plot(report: dict[str, Any], path: Path) -> None:
  """Two panels, speed and memory relative to softmax against T: ours solid, LRA's dashed in the
  same colour, Mega's 4K figure as a cross."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  rows, mine = published(), ours(report["records"])
  lra = [r for r in rows if r["source"] == LRA_SOURCE and r["mixer"]]
  mega = {r["mixer"]: r for r in rows if r["source"] == MEGA_SOURCE and r["mixer"]}
  lengths = sorted({t for _, t in mine} | set(LENGTHS))
  fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
  for ax, key, label in ((axes[0], "speedup", "steps/s relative to softmax"),
                         (axes[1], "memory_ratio", "peak memory relative to softmax")):
    for i, mixer in enumerate(MIXERS):
      style = {"color": f"C{i}", "label": mixer}
      for pts, fmt, alpha in (
          (sorted((t, q[key]) for (m, t), q in mine.items() if m == mixer), "-o", 1.0),
          (sorted((r["seq_len"], r[key]) for r in lra if r["mixer"] == mixer), "--s", 0.6),
          ([(4096, mega[mixer][key])] if mixer in mega else [], "x", 1.0)):
        if pts:
          ax.plot(*zip(*pts), fmt, alpha=alpha, markersize=7, **style)
          style.pop("label", None)  # one legend entry per mixer
    ax.set_yscale("log")
    ax.set_title(label, fontsize=10)
    ax.set_xlabel("sequence length T")
    ax.set_xticks(lengths, [f"{t / 1024:g}K" for t in lengths])
    ax.grid(True, which="both", alpha=0.3)
  axes[1].legend(fontsize=7, ncol=2)
  r0 = next((r for r in report["records"] if r.get("device")), report["records"][0])
  fig.suptitle(f"ours (solid): {r0.get('device')}, batch {r0['batch_size']}, {r0['num_layers']} "
               f"layers, D={r0['dim']};  LRA Table 2 (dashed): 4x4 TPU v3, batch 32;  Mega "
               "Table 2 (x): Text at 4K", fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def main(args, overrides: Sequence[str]) -> int:
  """`lra bench --lra-table`: the records, the table beside the published figures, and the files
  asked for."""
  mixers = args.mixers.split(",") if args.mixers else list(MIXERS)
  lengths = step_time.parse_lengths(args.lengths) if args.lengths else list(LENGTHS)
  sizes = {k: getattr(args, a) or v for (k, v), a in zip(LRA_SIZES.items(),
                                                          ("dim", "layers", "heads"))}
  if any(getattr(args, a) for a in ("dim", "layers", "heads")) and args.readme:
    raise errors.BadValue("--lra-table --readme writes LRA's model (D=256, 4 layers, 4 heads) "
                          "into the page: drop --dim/--layers/--heads, or --readme.")
  command = recorded_command()
  if args.xla_log:
    args.xla_log.parent.mkdir(parents=True, exist_ok=True)
    args.xla_log.write_text("")  # each record appends its part
  records = step_time.run_bench(
      mixers, lengths, args.batch or LRA_BATCH, **sizes, overrides=overrides,
      num_steps=args.steps, warmup_steps=args.warmup, min_time_s=args.min_time,
      isolate=not args.in_process, matmul_n=args.matmul_n, xla_log=args.xla_log,
      preset=PRESET, overrides_for=overrides_for,
      log=lambda line: print(line, file=sys.stderr, flush=True))
  report = {"command": command, "git": writers.git_sha(), "records": records,
            "date": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d}",
            **({"plot": writers.portable(str(args.plot))} if args.plot else {})}
  text = markdown(report)
  print(text)
  write_outputs(report, text, json_path=args.json, md_path=args.md, plot_path=args.plot,
                plot=plot)
  if args.readme:
    write_block(args.readme, report, args.json, DOC_MARKERS, doc_block)
  return 0
