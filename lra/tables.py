"""`lra table`: accuracy tables from complete runs, beside the published LRA numbers.

Writes results/tables/<task>.csv|md (every experiment of one task) and results/tables/lra.csv|md
(mixers x the six LRA tasks + the average of the five without Path-X). The CSVs are the source of
truth; the Markdown and the README block are renderings of the same rows. Output depends only on
the run files and the reference CSV (no timestamps), so `lra table --check` can compare.
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

import pandas as pd

from lra import results

LRA_TASKS = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")
AVG_TASKS = LRA_TASKS[:5]  # the LRA average leaves Path-X out (every baseline FAILs it)
TASK_TITLES = {"listops": "ListOps", "text": "Text", "retrieval": "Retrieval", "image": "Image",
               "pathfinder": "Pathfinder", "pathx": "Path-X", "avg": "Avg"}
# Classes per LRA task, for the chance marks of published rows (ours carry their own).
LRA_NUM_CLASSES = {"listops": 10, "text": 2, "retrieval": 2, "image": 10, "pathfinder": 2,
                   "pathx": 2}
PROTOCOL_PRESETS = ("paper", "lra")  # the only presets whose numbers are compared with papers
CHANCE_MARGIN = 1.0  # points: a mean this close to chance/majority has not learned the task
REFERENCE_CSV = Path(__file__).with_name("reference") / "published_lra.csv"
README_START, README_END = "<!-- lra-table:start -->", "<!-- lra-table:end -->"
CHANCE_MARK = "‡"

TASK_COLUMNS = ["source", "model", "mixer", "preset", "num_runs", "runs", "test_accuracy",
                "test_accuracy_std", "val_accuracy", "test_accuracy_last", "chance_accuracy",
                "majority_accuracy", "at_chance", "published", "delta", "published_model",
                "steps_per_s", "num_params", "seq_len", "num_steps", "device", "reference"]


def load_published(path: Path = REFERENCE_CSV) -> list[dict[str, str]]:
  """Rows of the published-results CSV (accuracies in %, 'FAIL' or '' where there is none)."""
  with open(path, newline="") as f:
    rows = list(csv.DictReader(f))
  expected = {"model", "mixer", *LRA_TASKS, "source"}
  if not rows or not expected <= set(rows[0]):
    raise ValueError(f"{path}: expected columns {sorted(expected)}, found "
                     f"{sorted(rows[0]) if rows else 'no rows'}")
  for line, row in enumerate(rows, start=2):
    for task in LRA_TASKS:
      if row[task] not in ("", "FAIL"):
        try:
          float(row[task])
        except ValueError:
          raise ValueError(f"{path}:{line}: {task} is '{row[task]}', expected a percentage, "
                           "FAIL or empty") from None
  return rows


def _reference_for(mixer: str, published: list[dict[str, str]]) -> dict[str, str] | None:
  # The first published row of a mixer is its reference (for latte: L=40, the paper preset).
  return next((row for row in published if row["mixer"] == mixer), None)


def _num(value: Any) -> float | None:
  if value is None or value == "" or value == "FAIL":
    return None
  value = float(value)
  return None if math.isnan(value) else value


def _pct(value: Any) -> float | None:
  value = _num(value)
  return None if value is None else 100.0 * value


def _fmt(value: Any, digits: int = 2) -> str:
  if isinstance(value, str):
    return value
  value = _num(value)
  return "" if value is None else f"{value:.{digits}f}"


def _at_chance(acc: float | None, chance: float | None, majority: float | None = None) -> bool:
  floor = max(x for x in (chance, majority, 0.0) if x is not None)
  return acc is not None and acc <= floor + CHANCE_MARGIN


def _is_protocol(preset: str) -> bool:
  return preset in PROTOCOL_PRESETS


def task_rows(task: str, summary: pd.DataFrame,
              published: list[dict[str, str]]) -> list[dict[str, Any]]:
  """The rows of results/tables/<task>.csv: our experiments, then the published ones."""
  rows = []
  ours = summary[summary["task"] == task] if not summary.empty else summary
  for exp in _ordered(ours, published):
    ref = _reference_for(exp["mixer"], published) if task in LRA_TASKS else None
    acc = _pct(exp["test_accuracy"])
    ref_acc = _num(ref[task]) if ref else None
    compare = _is_protocol(exp["preset"]) and ref is not None
    rows.append({
        "source": "ours", "model": exp["mixer"], "mixer": exp["mixer"], "preset": exp["label"],
        "num_runs": exp["num_runs"], "runs": exp["runs"], "test_accuracy": acc,
        "test_accuracy_std": _pct(exp["test_accuracy_std"]),
        "val_accuracy": _pct(exp["val_accuracy"]),
        "test_accuracy_last": _pct(exp["test_accuracy_last"]),
        "chance_accuracy": _pct(exp["chance_accuracy"]),
        "majority_accuracy": _pct(exp["majority_accuracy"]),
        "at_chance": _at_chance(acc, _pct(exp["chance_accuracy"]),
                                _pct(exp["majority_accuracy"])),
        "published": (ref[task] or None) if compare else None,
        "delta": acc - ref_acc if compare and acc is not None and ref_acc is not None else None,
        "published_model": ref["model"] if compare else "",
        "steps_per_s": exp["steps_per_s"], "num_params": exp["num_params"],
        "seq_len": exp["seq_len"], "num_steps": exp["num_steps"], "device": exp["device"],
        "reference": ""})
  if task in LRA_TASKS:
    chance = 100.0 / LRA_NUM_CLASSES[task]
    for ref in published:
      if not ref[task]:
        continue
      acc = _num(ref[task])
      rows.append({**{c: None for c in TASK_COLUMNS}, "source": "published",
                   "model": ref["model"], "mixer": ref["mixer"], "preset": "",
                   "test_accuracy": ref[task], "chance_accuracy": chance,
                   "at_chance": ref[task] == "FAIL" or _at_chance(acc, chance),
                   "reference": ref["source"]})
  return rows


def _ordered(ours: pd.DataFrame, published: list[dict[str, str]]) -> list[dict[str, Any]]:
  """Protocol presets first, then mixers in the reference CSV's order, then by label."""
  mixer_rank = {}
  for row in published:
    mixer_rank.setdefault(row["mixer"], len(mixer_rank))
  records = ours.to_dict("records")
  return sorted(records, key=lambda e: (not _is_protocol(e["preset"]),
                                        mixer_rank.get(e["mixer"], len(mixer_rank)),
                                        e["mixer"], e["label"]))


def lra_rows(summary: pd.DataFrame, published: list[dict[str, str]]) -> list[dict[str, Any]]:
  """The rows of results/tables/lra.csv: one per (mixer, preset label) of ours, then published."""
  per_task = {task: {(r["mixer"], r["preset"]): r for r in task_rows(task, summary, [])
                     if r["source"] == "ours"} for task in LRA_TASKS}
  keys = []
  lra_summary = summary[summary["task"].isin(LRA_TASKS)] if not summary.empty else summary
  for exp in _ordered(lra_summary, published):
    if (exp["mixer"], exp["label"]) not in keys:
      keys.append((exp["mixer"], exp["label"]))
  rows = []
  for mixer, label in keys:
    preset = label.split(" ")[0]
    ref = _reference_for(mixer, published) if _is_protocol(preset) else None
    row = {"source": "ours", "model": mixer, "mixer": mixer, "preset": label}
    devices, runs = set(), []
    for task in LRA_TASKS:
      cell = per_task[task].get((mixer, label))
      acc = cell["test_accuracy"] if cell else None
      ref_acc = _num(ref[task]) if ref else None
      row[task] = acc
      row[f"{task}_std"] = cell["test_accuracy_std"] if cell else None
      row[f"{task}_n"] = cell["num_runs"] if cell else None
      row[f"{task}_delta"] = acc - ref_acc if acc is not None and ref_acc is not None else None
      row[f"{task}_at_chance"] = cell["at_chance"] if cell else None
      if cell:
        devices.update(cell["device"].split(";"))
        runs.append(f"{task}:{cell['runs']}")
    row["avg"] = _average([row[t] for t in AVG_TASKS])
    ref_avg = _average([_num(ref[t]) for t in AVG_TASKS]) if ref else None
    row["avg_delta"] = (row["avg"] - ref_avg if row["avg"] is not None and ref_avg is not None
                        else None)
    row.update(published_model=ref["model"] if ref else "", device=";".join(sorted(devices)),
               runs=" ".join(runs), reference="")
    rows.append(row)
  for ref in published:
    row = {"source": "published", "model": ref["model"], "mixer": ref["mixer"], "preset": ""}
    for task in LRA_TASKS:
      row[task] = ref[task] or None
      row[f"{task}_at_chance"] = (ref[task] == "FAIL" or _at_chance(
          _num(ref[task]), 100.0 / LRA_NUM_CLASSES[task])) if ref[task] else None
    row["avg"] = _average([_num(ref[t]) for t in AVG_TASKS])
    row["reference"] = ref["source"]
    rows.append(row)
  return rows


LRA_COLUMNS = (["source", "model", "mixer", "preset", *LRA_TASKS, "avg"]
               + [f"{t}_std" for t in LRA_TASKS] + [f"{t}_n" for t in LRA_TASKS]
               + [f"{t}_delta" for t in (*LRA_TASKS, "avg")]
               + [f"{t}_at_chance" for t in LRA_TASKS]
               + ["published_model", "device", "runs", "reference"])


def _average(values: list[float | None]) -> float | None:
  # Only a full set of five is an LRA average; a partial mean would flatter missing tasks.
  return None if any(v is None for v in values) else sum(values) / len(values)


def _csv_text(rows: list[dict[str, Any]], columns: list[str], header: list[str]) -> str:
  out = io.StringIO()
  for line in header:
    out.write(f"# {line}\n")
  writer = csv.writer(out, lineterminator="\n")
  writer.writerow(columns)
  for row in rows:
    writer.writerow([_csv_value(row.get(c)) for c in columns])
  return out.getvalue()


def _csv_value(value: Any) -> str:
  if isinstance(value, bool):
    return "true" if value else "false"
  if isinstance(value, int):
    return str(value)
  if isinstance(value, float):
    return "" if math.isnan(value) else f"{value:.4f}"
  return "" if value is None else str(value)


def _cell(acc: Any, std: Any = None, n: Any = None, delta: Any = None,
          at_chance: Any = False) -> str:
  if acc is None or acc == "":
    return ""
  text = _fmt(acc)
  if std is not None and not (isinstance(std, float) and math.isnan(std)):
    text += f" ± {_fmt(std)}"
  if n is not None and n > 1:
    text += f" (n={n})"
  if delta is not None:
    text += f" Δ{delta:+.2f}"
  return text + (f" {CHANCE_MARK}" if at_chance else "")


def _md_table(header: list[str], rows: list[list[str]]) -> str:
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
  return "\n".join(lines)


LEGEND = ("Test accuracy (%) at the best validation step, mean ± sample std over seeds "
          "(n = number of seeds when more than one). Δ = ours minus the published row for the "
          "same mixer (only for the `paper` and `lra` presets; for Latte the L=40 row). "
          f"{CHANCE_MARK} = within {CHANCE_MARGIN:g} point of chance or of the majority class "
          "(FAIL in the LRA paper means the same). Avg = mean over the five tasks without Path-X, "
          "only when all five have a number.")


def lra_markdown_body(rows: list[dict[str, Any]], level: int = 2) -> str:
  """The lra.md sections (also embedded in the README), headings at `level`."""
  h = "#" * level
  titles = [TASK_TITLES[t] for t in (*LRA_TASKS, "avg")]
  ours = [r for r in rows if r["source"] == "ours"]

  def our_table(selected):
    return _md_table(["mixer", "preset", *titles, "device"], [
        [r["mixer"], r["preset"],
         *[_cell(r[t], r[f"{t}_std"], r[f"{t}_n"], r[f"{t}_delta"], r[f"{t}_at_chance"])
           for t in LRA_TASKS],
         _cell(r["avg"], delta=r["avg_delta"]), r["device"]] for r in selected])

  protocol = [r for r in ours if _is_protocol(r["preset"].split(" ")[0])]
  small = [r for r in ours if not _is_protocol(r["preset"].split(" ")[0])]
  parts = [LEGEND, f"{h} Ours: LRA protocol (presets `paper`, `lra`)"]
  parts.append(our_table(protocol) if protocol else
               "No complete run with the `paper` or `lra` preset yet. Run the grid with "
               "`lra sweep --tasks listops text retrieval image pathfinder pathx --mixers softmax "
               "latte --seeds 0 1 2 --run` (or `--emit slurm`), then `lra table`.")
  parts.append(f"{h} Ours: small presets (generated or reduced data; NOT comparable with the "
               "papers)")
  parts.append("Sanity checks that the pipeline learns: the `smoke` and `demo` presets train "
               "tiny models on small generated data (demo ListOps is far easier than LRA's), so "
               "no Δ is shown.")
  parts.append(our_table(small) if small else "No complete run with a small preset yet.")
  parts.append(f"{h} Published")
  parts.append(_md_table(["model", "mixer", *titles, "source"], [
      [r["model"], r["mixer"] or "",
       *[_cell(r[t], at_chance=r[f"{t}_at_chance"]) for t in LRA_TASKS], _cell(r["avg"]),
       r["reference"]] for r in rows if r["source"] == "published"]))
  return "\n\n".join(parts) + "\n"


def task_markdown(task: str, rows: list[dict[str, Any]], made_by: str) -> str:
  title = TASK_TITLES.get(task, task)
  header = ["source", "model", "preset", "test acc", "val acc", "last-step test",
            "chance / majority", "Δ", "steps/s", "params", "T", "steps", "device", "runs"]
  body = [[r["source"], r["model"], r["preset"] or "",
           _cell(r["test_accuracy"], r["test_accuracy_std"], r["num_runs"],
                 at_chance=r["at_chance"]),
           _fmt(r["val_accuracy"]), _fmt(r["test_accuracy_last"]),
           " / ".join(x for x in (_fmt(r["chance_accuracy"]), _fmt(r["majority_accuracy"])) if x),
           "" if r["delta"] is None else f"{r['delta']:+.2f} vs {r['published_model']}",
           _fmt(r["steps_per_s"], 1), "" if r["num_params"] is None else f"{r['num_params']:,}",
           _fmt(r["seq_len"], 0), _fmt(r["num_steps"], 0), r["device"] or "",
           r["runs"] or r["reference"] or ""] for r in rows]
  return (f"# {title}\n\n<!-- {made_by} -->\n\n{LEGEND}\n\n{_md_table(header, body)}\n")


def build(results_dir: Path, published_csv: Path = REFERENCE_CSV) -> dict[str, str]:
  """Every generated file, `{relative path under results_dir: text}`."""
  runs = results.load_runs(results_dir)
  complete = runs[runs["status"] == "complete"]
  summary = results.summarize(complete)
  published = load_published(published_csv)
  def made_by(num_runs: int, pattern: str = "*") -> str:
    return (f"Generated by `lra table` from {num_runs} complete run(s) in "
            f"results/runs/{pattern}/*/*/final.json (mean and sample std over seeds) and "
            f"lra/reference/published_lra.csv. Do not edit: rerun `lra table`.")
  skipped = runs[runs["status"] != "complete"]
  note = ("Not counted (not complete): " + ", ".join(
      f"{r.run_dir} ({r.status})" for r in skipped.itertuples()) + ".") if len(skipped) else ""
  files = {}
  tasks = sorted(set(complete["task"]) | set(LRA_TASKS) if len(complete) else LRA_TASKS)
  for task in tasks:
    rows = task_rows(task, summary, published)
    task_made_by = made_by(int((complete["task"] == task).sum()), task)
    files[f"tables/{task}.csv"] = _csv_text(rows, TASK_COLUMNS,
                                            [task_made_by, "Accuracies in %."])
    files[f"tables/{task}.md"] = task_markdown(task, rows, task_made_by)
  rows = lra_rows(summary, published)
  lra_made_by = made_by(int(complete["task"].isin(LRA_TASKS).sum()),
                        "{" + ",".join(LRA_TASKS) + "}")
  files["tables/lra.csv"] = _csv_text(rows, LRA_COLUMNS, [lra_made_by, "Accuracies in %."])
  other = [t for t in tasks if t not in LRA_TASKS]
  extra = ("\n\nOther tasks: " + ", ".join(f"[{t}]({t}.md)" for t in other) + ".") if other else ""
  files["tables/lra.md"] = (f"# LRA results\n\n<!-- {lra_made_by} -->\n\n"
                            + lra_markdown_body(rows) + (f"\n{note}\n" if note else "")
                            + (extra + "\n" if extra else ""))
  return files


def readme_block(files: dict[str, str]) -> str:
  """The README's Results block: lra.md's body one heading level down."""
  text = files["tables/lra.md"]
  body = text.split("-->\n\n", 1)[1]
  body = body.replace("\n### ", "\n#### ").replace("\n## ", "\n### ")
  body = body.replace("](", "](results/tables/")  # links in lra.md are relative to tables/
  return (f"{README_START}\n<!-- Generated by `lra table` from results/tables/lra.md; do not "
          f"edit between these markers. -->\n\n{body.rstrip()}\n\n{README_END}")


def splice_readme(readme: str, block: str, path: Path, markers: tuple[str, str] = (
    README_START, README_END), command: str = "lra table") -> str:
  """`readme` with the text from the start marker to the end marker (both kept, as `block`
  starts and ends with them) replaced by `block`."""
  start_marker, end_marker = markers
  start, end = readme.find(start_marker), readme.find(end_marker)
  if start < 0 or end < start:
    raise ValueError(f"{path}: expected the markers {start_marker} and {end_marker} around the "
                     f"generated table; add them to the README and rerun `{command}`.")
  return readme[:start] + block + readme[end + len(end_marker):]


def write(results_dir: Path, readme: Path | None = None) -> list[Path]:
  """Writes the tables (and the README block when `readme` is given); returns changed files."""
  changed = []
  for path, text in _expected(results_dir, readme).items():
    if not path.exists() or path.read_text() != text:
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_text(text)
      changed.append(path)
  return changed


def check(results_dir: Path, readme: Path | None = None) -> list[Path]:
  """Files whose committed text differs from what the runs give (empty: up to date)."""
  stale = [p for p, text in _expected(results_dir, readme).items()
           if not p.exists() or p.read_text() != text]
  tables = Path(results_dir) / "tables"
  expected = set(_expected(results_dir, None))
  stale += sorted(p for p in tables.glob("*.*") if p not in expected) if tables.is_dir() else []
  return stale


def _expected(results_dir: Path, readme: Path | None) -> dict[Path, str]:
  results_dir = Path(results_dir)
  files = build(results_dir)
  expected = {results_dir / rel: text for rel, text in files.items()}
  if readme is not None:
    expected[readme] = splice_readme(readme.read_text(), readme_block(files), readme)
  return expected
