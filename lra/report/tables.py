"""`lra table`: accuracy tables from complete runs, beside the published LRA numbers.

Writes results/tables/<task>.csv|md (every experiment of one task) and results/tables/lra.csv|md
(mixers x the six LRA tasks + the average of the five without Path-X). The CSVs are the source of
truth; the Markdown (lra.report.table_markdown), the README's blocks and docs/status.md's block
(lra.report.table_status: the status, from the same rows and the ledger) are renderings of them,
and so, for the committed runs, is lra/report/timings.json (the measured times the pages quote).
Output depends only on the run files and the reference CSV (no timestamps), so
`lra table --check` can compare.

Every run reports three statistics (final.json): test accuracy at the best validation step, the
best test accuracy over evaluations (what the Latte papers report), and test accuracy after the
last step (what the LRA code reports: its --test_only run restores the final checkpoint). A
published row says which one it is (`statistic` in the reference CSV), and a Δ is only ever taken
between the same statistic.
"""
from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd

from lra import errors
from lra.report import results, run_summary, table_markdown, table_status, timings
from lra.report.published import PUBLISHED_STATISTICS, REFERENCE_CSV, load_published  # noqa: F401
from lra.runs import writers
from lra.configs import pathfinder as pathfinder_config
# The shared rules, re-exported: callers read them as tables.LRA_TASKS etc.
from lra.report.table_rules import (AVG_TASKS, CHANCE_MARGIN, COMMITTED,  # noqa: F401
                                    CPU_PRESETS, LRA_TASKS, YOURS, PROTOCOL_PRESETS, PUBLISHED,
                                    RUN_SOURCES, STATISTICS, TASK_TITLES, at_chance, decimals,
                                    group)

# Classes per LRA task, for the chance marks of published rows (ours carry their own).
LRA_NUM_CLASSES = {"listops": 10, "text": 2, "retrieval": 2, "image": 10, "pathfinder": 2,
                   "pathx": 2}
README_START, README_END = "<!-- lra-table:start -->", "<!-- lra-table:end -->"

TASK_COLUMNS = ["source", "model", "mixer", "preset", "num_runs", "runs",
                "best_test_accuracy", "best_test_accuracy_std", "test_accuracy",
                "test_accuracy_std", "test_accuracy_min", "test_accuracy_max",
                "test_accuracy_last", "test_accuracy_last_std", "val_accuracy", "chance_accuracy",
                "majority_accuracy", "at_chance", "published", "published_statistic", "delta",
                "published_model", "steps_per_s", "num_params", "seq_len", "tokens", "num_steps",
                "examples_seen", "wall_time_s", "device", "reference"]


def _settings_hold(settings: str, config: dict[str, Any]) -> bool:
  """Whether a run's flat config meets a published row's `a.b=value;...` settings; a value
  `@c.d` means "equal to the run's c.d" (e.g. L = D)."""
  for condition in filter(None, (s.strip() for s in settings.split(";"))):
    key, _, want = condition.partition("=")
    have = config.get(key)
    target = config.get(want[1:]) if want.startswith("@") else want
    if have is None or str(have) != str(target):
      return False
  return True


def reference_for(mixer: str, config: dict[str, Any] | None,
                  published: list[dict[str, str]]) -> dict[str, str] | None:
  """The published row an experiment is compared with: the first row of its mixer whose
  settings its config meets (Latte's L=40 row for L=40, its L=D row for L=D)."""
  config = config if isinstance(config, dict) else {}
  return next((row for row in published if row["mixer"] == mixer
               and _settings_hold(row["settings"], config)), None)


def _num(value: Any) -> float | None:
  if value is None or value == "" or value == "FAIL":
    return None
  value = float(value)
  return None if math.isnan(value) else value


def _pct(value: Any) -> float | None:
  value = _num(value)
  return None if value is None else 100.0 * value


def _delta(ours: dict[str, Any], ref: dict[str, str] | None, task: str) -> float | None:
  """Ours minus the published number, on the statistic the published row reports."""
  if ref is None or ref["statistic"] not in STATISTICS:
    return None
  acc, ref_acc = ours.get(STATISTICS[ref["statistic"]][0]), _num(ref[task])
  return None if acc is None or ref_acc is None else acc - ref_acc


def task_rows(task: str, summary: pd.DataFrame,
              published: list[dict[str, str]]) -> list[dict[str, Any]]:
  """The rows of results/tables/<task>.csv: our experiments, then the published ones.

  `summary` may carry a `source` column (YOURS or COMMITTED; YOURS where absent).
  """
  rows = []
  ours = summary[summary["task"] == task] if not summary.empty else summary
  for exp in _ordered(ours, published):
    ref = reference_for(exp["mixer"], exp["config"], published) if task in LRA_TASKS else None
    shown = ref if group(exp["preset"]) != "small" else None
    row = {"source": exp.get("source", YOURS), "task": task, "model": exp["mixer"],
           "mixer": exp["mixer"],
           "preset": exp["label"], "num_runs": exp["num_runs"], "runs": exp["runs"]}
    for column in (*results.ACCURACIES, "val_accuracy", "chance_accuracy",
                   "majority_accuracy", "test_accuracy_min", "test_accuracy_max"):
      row[column] = _pct(exp.get(column))
    for column in results.ACCURACIES:
      row[column + "_std"] = _pct(exp.get(column + "_std"))
    row["at_chance"] = at_chance(row["test_accuracy"], row["chance_accuracy"],
                                 row["majority_accuracy"])
    row.update(published=(shown[task] or None) if shown else None,
               published_statistic=shown["statistic"] if shown else None,
               published_model=shown["model"] if shown else "",
               delta=_delta(row, shown, task) if group(exp["preset"]) == "protocol" else None,
               reference="")
    for column in ("steps_per_s", "num_params", "seq_len", "tokens", "num_steps", "examples_seen",
                   "wall_time_s", "device"):
      row[column] = exp.get(column)
    rows.append(row)
  if task in LRA_TASKS:
    chance = 100.0 / LRA_NUM_CLASSES[task]
    for ref in published:
      if not ref[task]:
        continue
      rows.append({**{c: None for c in TASK_COLUMNS}, "source": PUBLISHED,
                   "model": ref["model"], "mixer": ref["mixer"], "preset": "",
                   "published": ref[task], "published_statistic": ref["statistic"],
                   "chance_accuracy": chance,
                   "at_chance": ref[task] == "FAIL" or at_chance(_num(ref[task]), chance),
                   "reference": ref["source"]})
  return rows


def _ordered(ours: pd.DataFrame, published: list[dict[str, str]]) -> list[dict[str, Any]]:
  """Protocol presets first, then CPU-scale, then small; in each, the folder's own runs before
  committed ones; mixers in the reference CSV's order."""
  mixer_rank = {}
  for row in published:
    mixer_rank.setdefault(row["mixer"], len(mixer_rank))
  order = {"protocol": 0, "cpu": 1, "small": 2}
  return sorted(ours.to_dict("records"), key=lambda e: (
      order[group(e["preset"])], RUN_SOURCES.index(e.get("source", YOURS)),
      mixer_rank.get(e["mixer"], len(mixer_rank)), e["mixer"], e["label"]))


def lra_rows(summary: pd.DataFrame, published: list[dict[str, str]]) -> list[dict[str, Any]]:
  """The rows of results/tables/lra.csv: one per (source, mixer, preset label) of ours and the
  committed ones, then published.

  For each task: `<task>` (test at the best val step), `<task>_best`, `<task>_last`, their `_std`,
  `<task>_n`, `<task>_delta` (on the statistic of `<task>_published_statistic`) and
  `<task>_at_chance`; the same `avg`, `avg_best`, `avg_last` over the five tasks without Path-X.
  """
  per_task = {task: {(r["source"], r["mixer"], r["preset"]): r
                     for r in task_rows(task, summary, published) if r["source"] in RUN_SOURCES}
              for task in LRA_TASKS}
  keys = []
  lra_summary = summary[summary["task"].isin(LRA_TASKS)] if not summary.empty else summary
  for exp in _ordered(lra_summary, published):
    key = (exp.get("source", YOURS), exp["mixer"], exp["label"])
    if key not in keys:
      keys.append(key)
  rows = []
  suffixes = {"": "test_accuracy", "_best": "best_test_accuracy", "_last": "test_accuracy_last"}
  for source, mixer, label in keys:
    row = {"source": source, "model": mixer, "mixer": mixer, "preset": label}
    devices, runs, models = set(), [], []
    for task in LRA_TASKS:
      cell = per_task[task].get((source, mixer, label)) or {}
      for suffix, column in suffixes.items():
        row[f"{task}{suffix}"] = cell.get(column)
        row[f"{task}{suffix}_std"] = cell.get(column + "_std")
      row[f"{task}_n"] = cell.get("num_runs")
      row[f"{task}_delta"] = cell.get("delta")
      row[f"{task}_published_statistic"] = cell.get("published_statistic")
      row[f"{task}_at_chance"] = cell.get("at_chance")
      if cell:
        devices.update(cell["device"].split(";"))
        runs.append(f"{task}:{cell['runs']}")
        if cell.get("published_model") and cell["published_model"] not in models:
          models.append(cell["published_model"])
    for suffix in suffixes:
      row[f"avg{suffix}"] = _average([row[f"{t}{suffix}"] for t in AVG_TASKS])
    statistics = {row[f"{t}_published_statistic"] for t in AVG_TASKS}
    deltas = [row[f"{t}_delta"] for t in AVG_TASKS]
    row["avg_delta"] = (_average(deltas) if len(statistics) == 1 and None not in statistics
                        else None)
    row.update(published_model="; ".join(models), device=";".join(sorted(devices)),
               runs=" ".join(runs), reference="")
    rows.append(row)
  for ref in published:
    row = {"source": PUBLISHED, "model": ref["model"], "mixer": ref["mixer"], "preset": "",
           "published_statistic": ref["statistic"]}
    for task in LRA_TASKS:
      row[task] = ref[task] or None
      row[f"{task}_at_chance"] = (ref[task] == "FAIL" or at_chance(
          _num(ref[task]), 100.0 / LRA_NUM_CLASSES[task])) if ref[task] else None
    row["avg"] = _average([_num(ref[t]) for t in AVG_TASKS])
    row["reference"] = ref["source"]
    rows.append(row)
  return rows


LRA_COLUMNS = (["source", "model", "mixer", "preset", "published_statistic"]
               + [f"{t}{s}" for s in ("", "_best", "_last") for t in (*LRA_TASKS, "avg")]
               + [f"{t}{s}_std" for s in ("", "_best", "_last") for t in LRA_TASKS]
               + [f"{t}_n" for t in LRA_TASKS]
               + [f"{t}_delta" for t in (*LRA_TASKS, "avg")]
               + [f"{t}_published_statistic" for t in LRA_TASKS]
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


def build(results_dir: Path, published_csv: Path = REFERENCE_CSV,
          committed: Path | None = None) -> dict[str, str]:
  """Every generated file, `{relative path under results_dir: text}`.

  Args:
    results_dir: the folder whose runs/ the tables are of.
    published_csv: the published rows.
    committed: the repository's results folder, whose complete runs are shown beside those of
      `results_dir` as rows of their own (source COMMITTED), never averaged with them; None: none.
  """
  return _build(results_dir, published_csv, committed)[0]


def _build(results_dir: Path, published_csv: Path = REFERENCE_CSV,
           committed: Path | None = None) -> tuple[dict[str, str], dict[str, Any]]:
  """build's files, and what the README's blocks are made of: `readme`, the results block's
  body, and `task_rows`, {task: task_rows} for the status (lra.report.table_status)."""
  # Self-pretraining runs score hidden tokens, not the task: no row of an accuracy table.
  runs_all = results.load_runs(results_dir)
  runs = classifiers(runs_all)
  complete = runs[runs["status"] == "complete"]
  own = results.own_source(results_dir)
  summary = results.summarize(complete).assign(source=own)
  theirs = (classifiers(results.load_runs(committed, status="complete")) if committed
            else complete[:0])
  if len(theirs):
    summary = pd.concat([summary, results.summarize(theirs).assign(source=COMMITTED)],
                        ignore_index=True)
  published = load_published(published_csv)
  folder = folder_label(results_dir)

  def made_by(task_mask, pattern: str = "*") -> str:
    beside = (f", beside {int(task_mask(theirs).sum())} of the repository's committed run(s) "
              "(marked committed, never averaged with these)" if len(theirs) else "")
    return (f"Generated by `lra table` from {int(task_mask(complete).sum())} complete run(s) in "
            f"{folder}/runs/{pattern}/*/*/final.json (mean and sample std over seeds){beside} "
            "and lra/reference/published_lra.csv. Do not edit: rerun `lra table`.")
  skipped = runs[runs["status"] != "complete"]
  # Each folder as the table names it (from the results folder's parent); the command that
  # resumes it names the folder from where `lra` runs, as `lra status` and the stop message do.
  note = ("Not counted (not complete): " + ", ".join(
      f"{r['run_dir']} ({run_summary.state_text(r, results_dir.parent / r['run_dir'])})"
      for r in skipped.to_dict("records"))
      + ".") if len(skipped) else ""
  files = {}
  shown = pd.concat([complete["task"], theirs["task"]])
  tasks = sorted(set(shown) | set(LRA_TASKS) if len(shown) else LRA_TASKS)
  cpu_rows, by_task = [], {}
  for task in tasks:
    rows = by_task[task] = task_rows(task, summary, published)
    if task in LRA_TASKS:
      cpu_rows += [r for r in rows if r["source"] in RUN_SOURCES and group(r["preset"]) == "cpu"]
    task_made_by = made_by(lambda runs, task=task: runs["task"] == task, task)
    files[f"tables/{task}.csv"] = _csv_text(rows, TASK_COLUMNS,
                                            [task_made_by, "Accuracies in %."])
    files[f"tables/{task}.md"] = table_markdown.task_markdown(task, rows, task_made_by, own)
  rows = lra_rows(summary, published)
  lra_made_by = made_by(lambda runs: runs["task"].isin(LRA_TASKS),
                        "{" + ",".join(LRA_TASKS) + "}")
  files["tables/lra.csv"] = _csv_text(rows, LRA_COLUMNS, [lra_made_by, "Accuracies in %."])
  other = [t for t in tasks if t not in LRA_TASKS]
  extra = ("\n\nOther tasks: " + ", ".join(f"[{t}]({t}.md)" for t in other) + ".") if other else ""
  files[results.RUN_INDEX.as_posix()] = _csv_text(
      runs_all.to_dict("records"), list(results.INDEX_COLUMNS),
      [f"Generated by `lra table` from every run in {folder}/runs/*/*/*/final.json: its key "
       "(config_id: seeds of one experiment share it) and speed, which a dry run's cost reads. "
       "Do not edit: rerun `lra table`."])
  files["tables/lra.md"] = (f"# LRA results\n\n<!-- {lra_made_by} -->\n\n"
                            + table_markdown.lra_markdown_body(rows, cpu_rows, own, cpu_reference=(
                                cpu_reference(results_dir) if any(
                                    r["task"] == "pathfinder" for r in cpu_rows) else ""))
                            + (f"\n{note}\n" if note else "") + (extra + "\n" if extra else ""))
  return files, {"readme": table_markdown.readme_body(rows, cpu_rows, own),
                 "task_rows": by_task}


def classifiers(runs: pd.DataFrame) -> pd.DataFrame:
  """The runs that classify (every run before self-pretraining, and every fine-tune)."""
  return runs[runs["objective"].fillna("classify") != "denoise"]


# The CNN probe's run on the laptop's own Pathfinder set: what a CPU reached on that task.
PROBE_RUN = Path("pathfinder_probe") / "hard_dilated_50k" / "probe.json"


def cpu_reference(results_dir: Path) -> str:
  """A line naming what a non-sequence model reached on the CPU presets' Pathfinder set (the
  repository's dilated CNN probe, tools/pathfinder_probe.py), or "" where the folder has none."""
  path = Path(results_dir) / PROBE_RUN
  if not path.is_file():
    return ""
  probe = json.loads(path.read_text())
  curve = probe["curve"]
  budget = pathfinder_config.LAPTOP_STEPS * pathfinder_config.LAPTOP_BATCH  # training images
  at_budget = min(curve, key=lambda p: abs(p["images_seen"] - budget))
  left = next((p for p in curve if p["test_accuracy"] >= 0.55), None)
  last = curve[-1]
  return (f"Reference on Pathfinder (not a sequence model): the dilated CNN of "
          f"`tools/pathfinder_probe.py`, on a hard 32x32 set generated as the preset's is "
          f"({probe['num_train']:,} training images), batch {probe['batch_size']}, on this CPU, "
          f"had {decimals(100 * at_budget['test_accuracy'], 1)}% test after "
          f"{at_budget['images_seen']:,} images (the laptop budget), first passed 55% after "
          + (f"{left['images_seen']:,} images ({left['epochs']:g} epochs)" if left else "none")
          + f", and reached {decimals(100 * last['test_accuracy'], 1)}% after "
          f"{last['epochs']:g} epochs "
          f"({last['seconds'] / 3600:.1f} h; results/{PROBE_RUN.parent.as_posix()}).")


def folder_label(results_dir: Path) -> str:
  """How a table names a results folder: `results` for the repository's committed one (so its
  tables read the same from any working directory), else the path as given."""
  committed = results.committed_results_dir()
  if committed is not None and Path(results_dir).resolve() == committed.resolve():
    return "results"
  return Path(results_dir).as_posix()


# The README block names the commit it was regenerated at; staleness ignores that line's hash
# (regenerating never reproduces it), and nothing else.
MADE_AT = re.compile(r"at commit ([0-9a-f]{7}|unknown)")


def readme_block(body: str, sha: str | None = None) -> str:
  """The README's Results block: `body` (table_markdown.readme_body: our `paper`/`lra` rows and
  the CPU summary), with the commit it was made at and a link to the rest (lra.md)."""
  sha = (sha or writers.git_sha()).removesuffix("-dirty")[:7]  # HEAD when it was regenerated
  return (f"{README_START}\n<!-- Generated by `lra table --committed`; do not edit between "
          f"these markers. -->\n\nRegenerated by `lra table --committed` at commit {sha} from "
          "the committed runs (complete runs only). Accuracies in %; on a CPU (presets "
          f"{', '.join(f'`{p}`' for p in CPU_PRESETS)}: one small model for every mixer, or its "
          "own block), test accuracy at the best validation step (the model chosen without the "
          "test set) beside the same mixer's published number (the papers' larger models, "
          "trained far longer); "
          f"{table_markdown.CHANCE_MARK} = within {CHANCE_MARGIN:g} point of chance or of the "
          "majority class. Each run's three statistics and cost, the small presets and the "
          "published rows: [results/tables/lra.md](results/tables/lra.md).\n\n"
          f"{body.rstrip()}\n\n{README_END}")


def _without_commit(text: str) -> str:
  return MADE_AT.sub("at commit X", text)


def splice_readme(readme: str, block: str, path: Path, markers: tuple[str, str] = (
    README_START, README_END), command: str = "lra table") -> str:
  """`readme` with the text from the start marker to the end marker (both kept, as `block`
  starts and ends with them) replaced by `block`."""
  start_marker, end_marker = markers
  start, end = readme.find(start_marker), readme.find(end_marker)
  if start < 0 or end < start:
    raise errors.BadValue(f"{path}: expected the markers {start_marker} and {end_marker} around "
                          f"the generated table; add them to the README and rerun `{command}`.")
  return readme[:start] + block + readme[end + len(end_marker):]


def write(results_dir: Path, readme: Path | None = None,
          committed: Path | None = None) -> list[Path]:
  """Writes the tables (and the README block when `readme` is given); returns changed files.
  `committed`: see build."""
  changed = []
  for path, text in _expected(results_dir, readme, committed).items():
    if not path.exists() or _without_commit(path.read_text()) != _without_commit(text):
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_text(text)
      changed.append(path)
  return changed


def check(results_dir: Path, readme: Path | None = None,
          committed: Path | None = None) -> list[Path]:
  """Files whose committed text differs from what the runs give (empty: up to date)."""
  expected = _expected(results_dir, readme, committed)
  stale = [p for p, text in expected.items()
           if not p.exists() or _without_commit(p.read_text()) != _without_commit(text)]
  tables = Path(results_dir) / "tables"
  stale += sorted(p for p in tables.glob("*.*") if p not in expected) if tables.is_dir() else []
  return stale


def _expected(results_dir: Path, readme: Path | None,
              committed: Path | None = None) -> dict[Path, str]:
  """Every generated file's text; with `readme`, also the README's blocks (the results; the
  short status where its markers are) and docs/status.md's block where that page exists."""
  results_dir = Path(results_dir)
  files, made = _build(results_dir, committed=committed)
  expected = {results_dir / rel: text for rel, text in files.items()}
  if readme is not None:
    text = splice_readme(readme.read_text(), readme_block(made["readme"]), readme)
    page = readme.parent / table_status.PAGE
    if table_status.README_MARKERS[0] in text or page.exists():
      status = table_status.Status(made["task_rows"], results_dir, cpu_reference(results_dir))
      if table_status.README_MARKERS[0] in text:
        text = splice_readme(text, status.readme_block(), readme, table_status.README_MARKERS,
                             "lra table --committed")
      if page.exists():
        expected[page] = splice_readme(page.read_text(), status.page_block(), page,
                                       table_status.PAGE_MARKERS, "lra table --committed")
    expected[readme] = text
    committed_dir = results.committed_results_dir()
    if committed_dir is not None and results_dir.resolve() == committed_dir.resolve():
      # The measured times the pages and the CLI quote, from the same runs (lra.report.timings).
      expected[timings.RECORD] = timings.render(made["task_rows"], results_dir)
  return expected
