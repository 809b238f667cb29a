"""The Markdown renderings of `lra table`'s rows (lra.md, <task>.md and the README block).

The rows themselves come from lra.report.tables, what each number is from lra.report.table_rules;
nothing here computes a score.
"""
from __future__ import annotations

import math
from typing import Any

from lra.report.published import load_published
from lra.report.table_rules import (AVG_TASKS, CHANCE_MARGIN, COMMITTED, CPU_PRESETS, LRA_TASKS,
                                    PROTOCOL_PRESETS, PUBLISHED, RUN_SOURCES, STATISTICS,
                                    TASK_TITLES, YOURS, decimals, group)

CHANCE_MARK = "‡"
STATISTIC_LABELS = {"best_test": "best test", "last": "last step",
                    "unstated": "statistic not stated"}

LEGEND = (
    "Accuracies in %, mean ± sample std over seeds (n = seeds when more than one). Each run "
    "reports three statistics: **best test** = " + STATISTICS["best_test"][1] + "; **last step** = "
    + STATISTICS["last"][1] + "; **at best val** = " + STATISTICS["best_val"][1] + ". Δ = ours "
    "minus the published row of the same mixer (and, for Latte, the same L), taken only between "
    "the same statistic and only for the `paper` and `lra` presets. "
    f"{CHANCE_MARK} = within {CHANCE_MARGIN:g} point of chance or of the majority class (FAIL in "
    "the LRA paper means the same). Avg = mean over the five tasks without Path-X, only when all "
    "five have a number.")


COMMITTED_NOTE = ("Rows marked committed are the repository's committed runs, shown beside "
                  "yours (marked yours) for comparison: each is averaged over its own seeds only, "
                  "never with yours.")


def _mixer(row: dict[str, Any], mixed: bool = False) -> str:
  """The mixer cell: its name, and in a table of yours beside the committed runs (`mixed`) whose
  runs it is (as <task>.md's source column says)."""
  mark = {COMMITTED: " (committed)", YOURS: " (yours)"}.get(row["source"], "") if mixed else ""
  return row["mixer"] + mark


def _beside(own: str, rows) -> bool:
  """Whether a table of your folder (`own` YOURS) shows committed rows beside: then each row says
  whose it is. The committed tables' own rows are all COMMITTED and need no mark."""
  return own == YOURS and any(r["source"] == COMMITTED for r in rows)


def _missing(value: Any) -> bool:
  """None, or NaN (what pandas puts where a run file has no such key)."""
  return value is None or (isinstance(value, float) and math.isnan(value))


def _fmt(value: Any, digits: int = 2) -> str:
  if isinstance(value, str):
    return value
  if _missing(value):
    return ""
  return decimals(value, digits)


def _cell(acc: Any, std: Any = None, n: Any = None, delta: Any = None,
          at_chance: Any = False) -> str:
  if acc is None or acc == "":
    return ""
  text = _fmt(acc)
  if not _missing(std):
    text += f" ± {_fmt(std)}"
  if n is not None and n > 1:
    text += f" (n={n})"
  if delta is not None:
    text += f" Δ{'+' if delta >= 0 else ''}{decimals(delta)}"
  return text + (f" {CHANCE_MARK}" if at_chance else "")


def _count(value: Any) -> str:
  """An integer with thousands separators; "" when missing (None, or NaN from pandas)."""
  return "" if _missing(value) else f"{int(value):,}"


def _md_table(header: list[str], rows: list[list[str]]) -> str:
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
  return "\n".join(lines)


def _duration(seconds: Any) -> str:
  if _missing(seconds):
    return ""
  seconds = float(seconds)
  if seconds < 60:
    return f"{seconds:.0f} s"
  minutes = int(round(seconds / 60))
  return f"{minutes // 60}h{minutes % 60:02d}" if minutes >= 60 else f"{minutes} min"


def _protocol_tables(rows: list[dict[str, Any]], h: str, mixed: bool = False) -> list[str]:
  """One table per statistic; Δ only in the table of the statistic the published row reports."""
  titles = [TASK_TITLES[t] for t in (*LRA_TASKS, "avg")]
  parts = []
  for name, suffix in (("best_test", "_best"), ("last", "_last"), ("best_val", "")):
    def delta(row, task):
      return row[f"{task}_delta"] if row[f"{task}_published_statistic"] == name else None

    def avg_delta(row):
      same = all(row[f"{t}_published_statistic"] == name for t in AVG_TASKS)
      return row["avg_delta"] if same else None
    parts.append(f"{h}# {STATISTICS[name][1][0].upper() + STATISTICS[name][1][1:]}")
    parts.append(_md_table(["mixer", "preset", *titles, "device"], [
        [_mixer(r, mixed), r["preset"],
         *[_cell(r[f"{t}{suffix}"], r[f"{t}{suffix}_std"], r[f"{t}_n"], delta(r, t),
                 r[f"{t}_at_chance"] if suffix == "" else False) for t in LRA_TASKS],
         _cell(r[f"avg{suffix}"], delta=avg_delta(r)), r["device"]] for r in rows]))
  return parts


def lra_markdown_body(rows: list[dict[str, Any]], cpu_rows: list[dict[str, Any]], own: str,
                      level: int = 2, cpu_reference: str = "") -> str:
  """The lra.md sections, headings at `level` (the README's block is `readme_body`).

  Args:
    rows: lra.report.tables.lra_rows.
    cpu_rows: the task rows (lra.report.tables.task_rows) of CPU-scale presets, all LRA tasks.
    cpu_reference: what a non-sequence model reached on a CPU task (a line under its table).
  """
  h = "#" * level
  titles = [TASK_TITLES[t] for t in (*LRA_TASKS, "avg")]
  ours = [r for r in rows if r["source"] in RUN_SOURCES]
  by_group = {g: [r for r in ours if group(r["preset"]) == g] for g in ("protocol", "cpu",
                                                                       "small")}
  mixed = _beside(own, (*ours, *cpu_rows))
  parts = [LEGEND + (f" {COMMITTED_NOTE}" if mixed else ""),
           *_protocol_part(by_group["protocol"], h, mixed), _cpu_heading(h)]
  parts.append("The full LRA task data at full length, with a model small enough to train on a "
               "laptop CPU: under `laptop` the same model for every mixer, so the ordering of "
               "mixers is informative (`laptop_published`: S5's or Mega-Chunk's own "
               "architecture on the same data and budget), but not the papers' models, so the "
               "published numbers of the same mixer are shown beside ours without a Δ. "
               "`squares` (and `squares_published`) is not an LRA task: Pathfinder's easy set "
               "read as 64 squares of 4x4 pixels, where mixers learn on one core. Wall "
               "time: training with its "
               "evaluations, summed over a run's parts; steps/s: training steps per second in "
               "the run's last log window (evaluations excluded).")
  if cpu_rows:
    parts.append("Test accuracy at the best validation step, one column per task; published: the "
                 "same mixer's published number (LRA's or its paper's larger model, trained far "
                 "longer). Each run's three statistics and cost are in the table after it.")
    parts.append(_cpu_summary(cpu_rows, mixed))
    if cpu_reference:
      parts.append(cpu_reference)
    parts.append(_cpu_table(cpu_rows, mixed))
  else:
    parts.append(_NO_CPU_RUN)
  parts.append(f"{h} Ours: small presets (generated or reduced data; NOT comparable with the "
               "papers)")
  parts.append("Sanity checks that the pipeline learns: the `smoke` and `demo` presets train "
               "tiny models on small generated data (demo ListOps is far easier than LRA's), so "
               "no Δ is shown. Each cell: best test · test at best val.")
  parts.append(_md_table(["mixer", "preset", *titles[:-1], "device"], [
      [_mixer(r, mixed), r["preset"],
       *[_pair(r, t) for t in LRA_TASKS], r["device"]] for r in by_group["small"]])
      if by_group["small"] else "No complete run with a small preset yet.")
  parts.append(f"{h} Published")
  parts.append(_md_table(["model", "mixer", "statistic", *titles, "source"], [
      [r["model"], r["mixer"] or "", STATISTIC_LABELS[r["published_statistic"]],
       *[_cell(r[t], at_chance=r[f"{t}_at_chance"]) for t in LRA_TASKS], _cell(r["avg"]),
       r["reference"]] for r in rows if r["source"] == PUBLISHED]))
  return "\n\n".join(parts) + "\n"


def readme_body(rows: list[dict[str, Any]], cpu_rows: list[dict[str, Any]], own: str,
                level: int = 3) -> str:
  """The README's results: our `paper`/`lra` rows (where there are any) and the CPU summary (a
  line per mixer, a column per task), under headings at `level`. The legend, each run's cost and
  the small presets stay in lra.md, so the front page keeps to one table.

  Args:
    rows: lra.report.tables.lra_rows.
    cpu_rows: the task rows (lra.report.tables.task_rows) of CPU-scale presets, all LRA tasks.
  """
  h = "#" * level
  ours = [r for r in rows if r["source"] in RUN_SOURCES]
  mixed = _beside(own, (*ours, *cpu_rows))
  protocol = [r for r in ours if group(r["preset"]) == "protocol"]
  # Without protocol rows the section would only say so (the README's status says it already),
  # and the CPU table then needs no heading of its own.
  parts = [*_protocol_part(protocol, h, mixed), _cpu_heading(h)] if protocol else []
  parts.append(_cpu_summary(cpu_rows, mixed) if cpu_rows else _NO_CPU_RUN)
  return "\n\n".join(parts) + "\n"


def _protocol_part(protocol_rows: list[dict[str, Any]], h: str, mixed: bool) -> list[str]:
  """The heading of our protocol-preset rows, then their tables, or what to run for them."""
  heading = f"{h} Ours: LRA protocol (presets {', '.join(f'`{p}`' for p in PROTOCOL_PRESETS)})"
  if protocol_rows:
    return [heading, *_protocol_tables(protocol_rows, h, mixed)]
  return [heading, "No complete run with the `paper` or `lra` preset yet (accelerator work). Run "
          "the grid with `lra sweep --tasks listops text retrieval image pathfinder pathx "
          "--mixers softmax latte --seeds 0 1 2 --run` (or `--emit slurm`), then `lra table`."]


def _cpu_heading(h: str) -> str:
  return f"{h} Ours: the LRA tasks on a CPU (preset {', '.join(f'`{p}`' for p in CPU_PRESETS)})"


_NO_CPU_RUN = ("No complete run with the `laptop` preset yet: `lra run listops MIXER --preset "
               "laptop` (or `pathfinder`).")


def _pair(row: dict[str, Any], task: str) -> str:
  best, at_val = _cell(row[f"{task}_best"], row[f"{task}_best_std"]), _cell(
      row[task], row[f"{task}_std"], row[f"{task}_n"], at_chance=row[f"{task}_at_chance"])
  if not at_val:
    return ""
  return f"{best or '–'} · {at_val}"


def _published(row: dict[str, Any]) -> str:
  if row["published"] is None:
    return ""
  return f"{_fmt(row['published'])} ({STATISTIC_LABELS[row['published_statistic']]})"


def _cpu_column(row: dict[str, Any]) -> tuple[str, str, bool]:
  """(task, preset family, self-pretrained) of a CPU row: `squares` is its own column, never
  LRA's Pathfinder, and fine-tunes from self-pretraining (SPT) stand in columns of their own
  beside the same task's from-scratch column, never in its cells."""
  return (row["task"], "squares" if row["preset"].startswith("squares") else "laptop",
          "spt" in _variant(row)[:1])


def _variant(row: dict[str, Any]) -> list[str]:
  """What a row's run name adds to its preset: ["spt", "model.dim=32", ...] ([] for none)."""
  _, _, variant = row["preset"].partition(" (")
  tail = variant.rstrip(")").partition("+")[2]
  return tail.split(",") if tail else []


def _block(row: dict[str, Any]) -> str:
  """"common block" or "own block" (the *_published presets), and where the row's runs depart
  from their preset, those settings: a variant is a line of its own, never another's cell."""
  preset = row["preset"].partition(" (")[0]
  block = "own block" if preset.split(" ")[0].endswith("_published") else "common block"
  departures = ",".join(part for part in _variant(row) if part != "spt")
  return f"{block}, {departures}" if departures else block


def _column_title(task: str, family: str, spt: bool) -> str:
  title = SQUARES_TITLE if family == "squares" else TASK_TITLES[task]
  return title + (", SPT" if spt else "")


def _cpu_summary(rows: list[dict[str, Any]], mixed: bool = False) -> str:
  """One line per mixer and block (the common block, or S5's and Mega-Chunk's own under the
  *_published presets), one column per CPU task (Pathfinder on squares apart from LRA's), the same
  mixer's published number beside each; under it, how the squares column ranks the mixers against
  their published Pathfinder numbers."""
  columns = [(t, f, spt) for t in LRA_TASKS for f in ("laptop", "squares")
             for spt in (False, True) if any(_cpu_column(r) == (t, f, spt) for r in rows)]
  lines: dict[tuple, dict[tuple, dict[str, Any]]] = {}
  for r in rows:
    lines.setdefault((_mixer(r, mixed), _block(r)), {})[_cpu_column(r)] = r
  # The published number stands beside a task's first column (from scratch, or SPT alone).
  published = {column: not column[2] or (column[0], column[1], False) not in columns
               for column in columns}
  header = ["mixer", "block"]
  for column in columns:
    header.append(_column_title(*column))
    if published[column]:
      header.append("published (1,024 pixels)" if column[1] == "squares" else "published")
  body = []
  for (mixer, block), by_column in lines.items():
    cells = [mixer, block]
    for column in columns:
      r = by_column.get(column)
      cells.append("" if r is None else _cell(r["test_accuracy"], r["test_accuracy_std"],
                                              r["num_runs"], at_chance=r["at_chance"]))
      if published[column]:
        cells.append(_published_of(lines[(mixer, block)], column))
    body.append(cells)
  parts = [_md_table(header, body)]
  if any(family == "squares" for _, family, _ in columns):
    parts.append(SQUARES_NOTE + " " + " ".join(
        _squares_rank_line(rows, _column_title("pathfinder", "squares", spt), spt=spt)
        for spt in (False, True) if ("pathfinder", "squares", spt) in columns))
  if any(spt for *_, spt in columns):
    parts.append(SPT_NOTE)
  return "\n\n".join(parts)


def _published_of(by_column: dict[tuple, dict[str, Any]], column: tuple) -> str:
  """The published number of a line's mixer for a column's task (from whichever of its rows
  has it: an SPT row's mixer is the from-scratch row's)."""
  for key in (column, (column[0], column[1], not column[2])):
    if key in by_column:
      return _published(by_column[key])
  return ""


SQUARES_TITLE = "Pathfinder, 4x4 squares"
# The mixers whose published rows are of their own blocks (configs/published.py).
OWN_BLOCKS = ("s5", "mega")
SQUARES_NOTE = ("Pathfinder, 4x4 squares: NOT LRA's Pathfinder but its easy set with each 4x4 "
                "pixel square one token (64 tokens; preset `squares`, docs/presets_cpu.md); the "
                "published figures beside it are the 1,024-pixel task's.")


SPT_NOTE = ("SPT: fine-tuned from self-pretraining on the task's own training inputs (`lra "
            "pretrain`, then `lra run --init-from`; Amos et al., ICLR 2024), pretraining and "
            "fine-tuning together the from-scratch row's steps (docs/presets_spt.md); never "
            "averaged with the from-scratch runs.")


def squares_rank(rows: list[dict[str, Any]], spt: bool = False,
                 own_blocks: bool = False) -> tuple[float | None, int]:
  """Spearman's rank correlation between the squares column (common block, ours; its SPT twin
  with `spt`) and the same mixers' published Pathfinder numbers, and how many mixers have both
  (None below 3). `own_blocks`: S5 and Mega-Chunk also count, with the rows of their own blocks
  (`squares_published`, today's preset) beside their own blocks' published rows (their common
  blocks have no published number)."""
  suffix = " (squares+spt)" if spt else ""
  ours = [r for r in rows if r["test_accuracy"] is not None and r["source"] in RUN_SOURCES]
  chosen = {r["mixer"]: (r["test_accuracy"], r["published"]) for r in ours
            if r["preset"] == "squares" + suffix and r["published"] is not None}
  if own_blocks:
    published = _own_block_published()
    own = "squares_published" + suffix.replace("squares+", "squares_published+")
    chosen.update({r["mixer"]: (r["test_accuracy"], published[r["mixer"]]) for r in ours
                   if r["preset"] == own and r["mixer"] in published})
  pairs = [(a, float(b)) for a, b in chosen.values()]
  if len(pairs) < 3:
    return None, len(pairs)
  return spearman([a for a, _ in pairs], [b for _, b in pairs]), len(pairs)


def _own_block_published() -> dict[str, str]:
  """Each own block's published Pathfinder number (lra/reference/published_lra.csv), by mixer."""
  return {r["mixer"]: r["pathfinder"] for r in load_published()
          if r["mixer"] in OWN_BLOCKS and r["pathfinder"] not in ("", "FAIL")}


def _squares_rank_line(rows: list[dict[str, Any]], column: str = "this column",
                       spt: bool = False) -> str:
  """squares_rank as a sentence, with the own blocks' version where it differs; `column`: how
  the line names the squares column."""
  rho, count = squares_rank(rows, spt)
  if rho is None:
    return (f"Rank correlation of {column} with the published Pathfinder column: needs 3 "
            f"mixers with both, {count} so far.")
  line = (f"Spearman's rank correlation between {column} and the published Pathfinder "
          f"column, over the {count} mixers with both: {rho:+.2f}")
  own, with_own = squares_rank(rows, spt, own_blocks=True)
  if own is not None and with_own > count:
    line += (f"; {own:+.2f} over {with_own} with S5's and Mega-Chunk's own blocks "
             "(`squares_published`) beside their own blocks' published rows")
  return line + "."


def spearman(xs: list[float], ys: list[float]) -> float:
  """Spearman's rho: Pearson's correlation of the ranks, ties given their mean rank."""
  import pandas as pd
  return float(pd.Series(xs).rank().corr(pd.Series(ys).rank()))


def _cpu_table(rows: list[dict[str, Any]], mixed: bool = False) -> str:
  """One line per experiment: the three statistics, the published number of the same mixer beside,
  and what the run cost."""
  return _md_table(
      ["mixer", "task", "preset", "best test", "at best val", "last step", "published",
       "steps", "examples seen", "wall time", "steps/s", "device"],
      [[_mixer(r, mixed), TASK_TITLES[r["task"]], r["preset"],
        _cell(r["best_test_accuracy"], r["best_test_accuracy_std"], r["num_runs"]),
        _cell(r["test_accuracy"], r["test_accuracy_std"], at_chance=r["at_chance"]),
        _cell(r["test_accuracy_last"], r["test_accuracy_last_std"]), _published(r),
        _fmt(r["num_steps"], 0),
        _count(r["examples_seen"]),
        _duration(r["wall_time_s"]), _fmt(r["steps_per_s"], 2), r["device"] or ""]
       for r in rows])


def _tokens(row: dict[str, Any]) -> str:
  """The tokens the model read, and the pixels where they differ ("64 (1,024 px)")."""
  tokens, pixels = row.get("tokens"), row.get("seq_len")
  if _missing(tokens):
    return _fmt(pixels, 0)
  return _fmt(tokens, 0) + (f" ({_count(pixels)} px)" if not _missing(pixels) and pixels != tokens
                            else "")


def task_markdown(task: str, rows: list[dict[str, Any]], made_by: str, own: str) -> str:
  """<task>.md: every experiment of one task with all three statistics, then the published."""
  title = TASK_TITLES.get(task, task)
  header = ["source", "model", "preset", "best test", "at best val", "last step", "val acc",
            "chance / majority", "published", "Δ", "steps/s", "params", "tokens", "steps",
            "examples seen", "wall time", "device", "runs"]
  body = []
  for r in rows:
    body.append([
        r["source"], r["model"], r["preset"] or "",
        _cell(r["best_test_accuracy"], r["best_test_accuracy_std"]),
        _cell(r["test_accuracy"], r["test_accuracy_std"], r["num_runs"],
              at_chance=r["at_chance"] and r["source"] in RUN_SOURCES),
        _cell(r["test_accuracy_last"], r["test_accuracy_last_std"]),
        _fmt(r["val_accuracy"]),
        " / ".join(x for x in (_fmt(r["chance_accuracy"]), _fmt(r["majority_accuracy"])) if x),
        _published(r) + (f" {CHANCE_MARK}" if r["source"] == PUBLISHED and r["at_chance"]
                         else ""),
        "" if r["delta"] is None else f"{r['delta']:+.2f} vs {r['published_model']}",
        _fmt(r["steps_per_s"], 1), _count(r["num_params"]),
        _tokens(r), _fmt(r["num_steps"], 0),
        _count(r["examples_seen"]),
        _duration(r["wall_time_s"]), r["device"] or "", r["runs"] or r["reference"] or ""])
  mixed = _beside(own, rows)
  legend = LEGEND + (f" {COMMITTED_NOTE}" if mixed else "")
  return f"# {title}\n\n<!-- {made_by} -->\n\n{legend}\n\n{_md_table(header, body)}\n"
