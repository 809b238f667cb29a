"""Advances the ledger's first unfinished paper row on a lent GPU, within a wall-time budget.

  bash tools/accelerator_rows.sh OUT --budget-s 420 [--probe]       # on the lent machine
  python tools/accelerator_rows.py --adopt OUT                        # back here: put it in place
  python tools/accelerator_rows.py --quick --out OUT --results-dir R  # a CPU try-out (tests)

On the lent machine it picks the first row of results/ledger.json whose run folder is neither
complete nor stopped (diverged or failed: such rows are listed in the report and skipped, since
rerunning one repeats the same steps from the same state), unpacks that folder's committed
archive (run.pack or its parts) if there is one, makes the row's data on all host cores while the
accelerator compiles the row's steps (a separate process filling JAX's persistent compilation
cache, which the run then reads), trains with `lra run ... --stop-after` so the run ends, saved,
before the budget, packs it into OUT and writes OUT/rows.md and OUT/rows.json (per row: steps
before and after, the best so far, steps/s, where the minutes went). A row whose run diverges or
fails here is packed too where it can be, and its final.json travels in rows.json, so that
adopting it records the stop and later loans skip it. A row that completes (or stops) with time
to spare hands the rest of the budget to the next unfinished row, whose data and compiled steps
were made beside the first one's training.
With --probe, tools/step_probe.py runs first (its report into OUT too) while the data is made.
Its working folder (.rows/, ignored by git) survives between calls to a warm machine, so a
second call reuses the data, the compiled steps and the newer state.

Back on the session's machine, --adopt OUT moves each archive into its row's run folder
(replacing the previous one, parts included) and its run files beside it, ready to commit (a
stopped row without an archive gets its final.json).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PACK_RESERVE_S = 30  # packing (~20 MB), the report, the command's exit
# A further row is begun only with this much of the budget left: its state placed, a minute of
# training, its pack. Less would add an archive to OUT for a few steps.
NEXT_ROW_MIN_S = 120
# Batch lengths compiled at once by the warm-up (each program's XLA compile and autotuning run in
# C++, outside the GIL).
COMPILE_THREADS = 6
OUT_FILES_MAX = 8  # what a device call returns; a further row's archive may take two of them
# How each task's rows get their data: LRA's generated ListOps (the default recipe, whose stream
# states are recorded: the same files on any number of cores) and LRA's hard Pathfinder-32.
DATA = {
    "listops": {"generate": [], "cache": "listops"},
    "pathfinder": {"generate": ["--resolution", "32", "--difficulty", "hard", "--num-images",
                                "200000"], "cache": "pathfinder"},
}
QUICK_DATA = {"listops": ["--num-train", "512", "--num-val", "64", "--num-test", "64",
                          "--min-length", "8", "--max-length", "80", "--max-depth", "4",
                          "--max-args", "5"]}
# --quick: the row's command at a size a CPU runs in seconds (the run folder stays the row's).
QUICK_OVERRIDES = ("model.num_layers=1", "model.dim=32", "model.mlp_dim=64",
                   "train.batch_size=16", "train.num_steps=60", "train.log_every_steps=5",
                   "eval.every_steps=20", "eval.batch_size=32", "checkpoint.every_steps=20")
QUICK_SPEC = {"listops": {"vocab_size": 16, "seq_len": 64, "num_classes": 10}}  # QUICK_DATA's


def lra(*args: str) -> list[str]:
  return [sys.executable, "-m", "lra", *args]


class Session:
  """One call: its budget, folders, row and report."""

  def __init__(self, args: argparse.Namespace):
    from lra.report import ledger
    from lra.runs import writers
    self.args, self.start = args, time.monotonic()
    self.deadline = self.start + args.budget_s
    self.out = Path(args.out)
    self.out.mkdir(parents=True, exist_ok=True)
    self.work = Path(args.work)
    self.work.mkdir(parents=True, exist_ok=True)
    self.results = self.work / "results"
    self.data_dir = self.work / "data"
    self.env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str((self.work / "jax_cache").resolve()),
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1", "PYTHONUNBUFFERED": "1"}
    self.ledger = ledger.load(args.results_dir / "ledger.json")
    self.finished: list[str] = []  # rows this call completed (their folders are in .rows/)
    self.made: set[str] = set()  # data caches this call made
    command = " ".join(map(writers.portable, args.argv))  # no machine's paths, as lra bench's
    self.report: dict[str, Any] = {"command": "python tools/accelerator_rows.py " + command,
                                   "quick": args.quick, "budget_s": args.budget_s, "rows": []}

  def next_row(self, skip: str | None = None) -> dict[str, Any] | None:
    """The first ledger row (other than `skip`) neither committed complete or stopped, nor
    completed by this call, nor stopped on this machine (a warm one's .rows/ keeps its state)."""
    from lra.report import ledger
    here = {row["id"] for row in ledger.stopped(self.ledger, self.results)}
    return ledger.first_unfinished(
        [r for r in self.ledger if r["id"] not in (*self.finished, *here, skip)],
        self.args.results_dir)

  def stopped_rows(self) -> list[dict[str, str]]:
    """The rows `next_row` skips as stopped (diverged or failed), each with where it stands."""
    from lra.report import ledger, run_summary
    committed = ledger.stopped(self.ledger, self.args.results_dir)
    skipped = [{"row": row["id"], "state": ledger.status(row, self.args.results_dir)}
               for row in committed]
    for row in ledger.stopped(self.ledger, self.results):
      if row not in committed:
        skipped.append({"row": row["id"], "state": run_summary.state_text(ledger.final(
            row, self.results)) + " (on this machine, not yet adopted)"})
    return skipped

  def left(self) -> float:
    return self.deadline - time.monotonic()

  def log(self, line: str) -> None:
    print(f"[{time.monotonic() - self.start:6.1f} s] {line}", flush=True)

  def child(self, cmd: list[str], log_name: str) -> subprocess.Popen:
    log = open(self.work / log_name, "a")  # pylint: disable=consider-using-with
    return subprocess.Popen(cmd, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)

  def write(self) -> None:
    self.report["wall_s"] = round(time.monotonic() - self.start, 1)
    (self.out / "rows.json").write_text(json.dumps(self.report, indent=1, default=str) + "\n")
    (self.out / "rows.md").write_text(render(self.report))


# ---------------------------------------------------------------------------------------------
# The pieces, in the order a call runs them.

def row_command(session: Session, row: dict[str, Any]) -> tuple[list[str], str]:
  """The row's `lra run` arguments (quick: shrunk) and its task."""
  from lra.report import ledger
  args = ledger.run_args(row)
  if session.args.quick:
    args += [f"--config.{o}" for o in QUICK_OVERRIDES]
  return args, ledger.parsed(row).task


class DataMaker(threading.Thread):
  """The row's prepared data under .rows/data/, made on the host's cores unless already there."""

  def __init__(self, session: Session, task: str):
    super().__init__(daemon=True)
    self.session, self.task = session, task
    self.status, self.seconds = None, None
    self.parts: dict[str, float] = {}  # each command's seconds and the workers: where time went
    self.proc: subprocess.Popen | None = None
    self.stopped = False  # RowWork.cancel: start no further command

  def run(self) -> None:
    began = time.monotonic()
    s, recipe = self.session, DATA[self.task]
    cache = s.data_dir / recipe["cache"]
    if (cache / "meta.json").exists():
      made_here = recipe["cache"] in s.made
      self.status = f"ready (made {'for an earlier row' if made_here else 'by an earlier call'})"
      self.seconds = 0.0
      return
    raw = s.work / f"{self.task}_raw"
    shutil.rmtree(raw, ignore_errors=True)
    # Leave two cores: one compiles (or probes) on the accelerator, one feeds it.
    workers = max(1, (os.cpu_count() or 3) - 2)
    self.parts["workers"] = workers
    generate = QUICK_DATA[self.task] if s.args.quick else recipe["generate"]
    for cmd in (lra("data", "generate", self.task, "--out", str(raw), "--workers", str(workers),
                    *generate),
                lra("data", "prepare", self.task, "--source", str(raw), "--data-dir",
                    str(s.data_dir))):
      if self.stopped:
        self.status = "stopped: the call ended first"
        break
      started = time.monotonic()
      self.proc = s.child(cmd, "data.log")
      code = self.proc.wait()
      self.parts[f"{cmd[4]}_s"] = round(time.monotonic() - started, 1)
      if code != 0:
        self.status = f"`{shlex.join(cmd[3:6])}` failed (see .rows/data.log)"
        break
    else:
      self.status = "ready"
      s.made.add(recipe["cache"])
      shutil.rmtree(raw, ignore_errors=True)
    self.seconds = time.monotonic() - began


class RowWork:
  """One row's preparation: its data (a thread on the host's cores) and its compiled steps (a
  child process filling the persistent compilation cache), each timed on its own."""

  def __init__(self, session: Session, row: dict[str, Any]):
    self.session, self.row = session, row
    self.args, self.task = row_command(session, row)
    self.spec = QUICK_SPEC[self.task] if session.args.quick else row["spec"]
    self.phases: dict[str, Any] = {}
    self.data = DataMaker(session, self.task)
    self.data.start()
    self.compile: subprocess.Popen | None = None
    self.compile_s: float | None = None
    self.compile_timer: threading.Thread | None = None

  def start_compile(self) -> None:
    began = time.monotonic()
    self.compile = self.session.child(
        [sys.executable, str(Path(__file__).resolve()), "--warm-up",
         json.dumps({"args": self.args, "spec": self.spec})], "warm_up.log")

    def timed(proc=self.compile):
      proc.wait()
      self.compile_s = round(time.monotonic() - began, 1)
    self.compile_timer = threading.Thread(target=timed, daemon=True)
    self.compile_timer.start()

  def cancel(self) -> None:
    """Stops what is still running: the call ends before this row's turn."""
    self.data.stopped = True
    for proc in (self.compile, self.data.proc):
      if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, 9)
    self.data.join()


def place_state(session: Session, row: dict[str, Any]) -> dict[str, Any]:
  """The row's newest state in .rows/results: a newer one left by an earlier call stays,
  else the committed archive is unpacked, else the row starts."""
  from lra.report import ledger
  from lra.runs import pack, writers
  args = session.args
  here = session.results / row["run"]
  committed = ledger.archive(row, args.results_dir)
  mine = ledger.final(row, session.results) if here.exists() else None
  theirs = pack.read_manifest(committed) if pack.parts_of(committed, existing_only=True) else None
  if mine and (theirs is None or (mine.get("step") or 0) >= (theirs.get("step") or 0)):
    return {"from": f"{writers.portable(str(here))} (an earlier call's)", "step": mine.get("step")}
  shutil.rmtree(here, ignore_errors=True)
  if theirs is None:
    return {"from": "nothing: the row starts", "step": 0}
  target, manifest = pack.unpack(committed, session.results)
  return {"from": str(committed.relative_to(args.results_dir.parent)
                      if committed.is_relative_to(args.results_dir.parent) else committed),
          "step": manifest["step"]}


def warm_up(row_args: list[str], spec: dict[str, Any]) -> None:
  """Compiles the row's train and eval steps as `lra run` will, at every batch length the run
  can meet (per-batch and sorted padding: each multiple of the pad quantum up to T, one program
  each; train.check_fits), filling the persistent compilation cache that the run then reads
  (child process, while the host makes the data; no data needed)."""
  from lra.runs.command import run_config
  from lra.training import train
  from lra.tasks.contract.spec import TaskSpec
  config = run_config(row_args)
  spec = TaskSpec(**spec)
  s = train.setup(config, spec)
  state = train.init_state(s, spec, config.train.seed)
  quantum = config.data.pad_quantum
  lengths = ([spec.seq_len] if s.batching.programs(spec.seq_len) == 1 else
             sorted({min(q, spec.seq_len) for q in range(quantum, spec.seq_len + quantum,
                                                            quantum)}, reverse=True))
  # T first: its memory check comes before any smaller program. The rest compile side by side:
  # one after another, a fresh H200 host took 291.5 s for the 32 programs of sorted ListOps
  # batches (9.1 s each, 2026-12-04), a third of a loan, while XLA's compiler and the GPU
  # autotuner each kept a few of the host's cores busy.
  train.check_fits(config, s, state, spec, length=lengths[0])
  with concurrent.futures.ThreadPoolExecutor(COMPILE_THREADS) as pool:
    for done in pool.map(lambda n: train.check_fits(config, s, state, spec, length=n),
                         lengths[1:]):
      del done  # each program is in JAX's persistent cache; an error is raised here


def metrics_summary(run_dir: Path, after: int) -> dict[str, Any]:
  """This call's training: steps/s (median of its log windows after the first), best so far."""
  from lra.runs.writers import read_metrics
  rows = read_metrics(run_dir / "metrics.jsonl") if (run_dir / "metrics.jsonl").exists() else []
  rates = [r["train/steps_per_s"] for r in rows if r["step"] > after and "train/steps_per_s" in r]
  final = json.loads((run_dir / "final.json").read_text()) if (run_dir / "final.json").exists() \
      else {}
  return {"steps_per_s": statistics.median(rates[1:]) if len(rates) > 1 else (
              rates[0] if rates else None),
          "step": final.get("step"), "num_steps": final.get("num_steps"),
          "status": final.get("status"), "best_step": final.get("best_step"),
          "val_accuracy": final.get("val_accuracy"), "test_accuracy": final.get("test_accuracy"),
          "best_test_accuracy": final.get("best_test_accuracy"),
          "stop_reason": final.get("stop_reason"), "device": final.get("device"),
          "jax": (final.get("versions") or {}).get("jax")}


def advance(session: Session) -> None:
  """The whole call: the first unfinished row (after the probe, if asked), then, while one
  completes (or stops) with NEXT_ROW_MIN_S to spare, the next."""
  skipped = session.report["skipped"] = session.stopped_rows()
  for entry in skipped:
    session.log(f"skipped {entry['row']}: {entry['state']}")
  row = session.next_row()
  if row is None:
    session.report["status"] = (f"every ledger row is complete{' or stopped' if skipped else ''}"
                                ": nothing to run")
    return
  work = RowWork(session, row)
  if session.args.probe:  # the probe on the accelerator while the host makes the data
    began = time.monotonic()
    probe = session.child([sys.executable, str(REPO / "tools" / "step_probe.py"), "--out",
                           str(session.out), "--budget-s", str(session.args.probe_budget_s),
                           *(["--quick"] if session.args.quick else [])], "probe.log")
    code = probe.wait()
    work.phases["probe"] = {"seconds": round(time.monotonic() - began, 1), "exit_code": code,
                            "report": "step_probe.md"}
    session.log(f"probe: exit {code}")
  work.start_compile()
  while work is not None:
    work = advance_row(session, work)
  sections = session.report["rows"]
  session.report["status"] = (sections[0]["status"] if len(sections) == 1 else "; ".join(
      f"{s['row']} {s['status']}" for s in sections))
  folders = [f"results/{s['run']}/" for s in sections if s.get("archive") or s.get("final")]
  if folders:
    session.report["next"] = (
        "python tools/accelerator_rows.py --adopt OUT; then commit each row's run folder "
        f"({', '.join(folders)}: run.pack*, config.json, final.json, metrics.jsonl) and the "
        "tables (lra table --committed)")


def advance_row(session: Session, work: RowWork) -> RowWork | None:
  """One row: state, compiled steps and data, training, pack, its section of the report.
  Returns the next row's work when this row completed with time to spare, else None."""
  from lra.report import ledger
  row = work.row
  section: dict[str, Any] = {"row": row["id"], "row_command": row["command"], "run": row["run"],
                             "phases": work.phases}
  session.report["rows"].append(section)
  session.log(f"row {row['id']}: {row['command']}")
  state = place_state(session, row)
  section["phases"]["state"] = state
  session.log(f"state: {state['from']} (step {state['step']})")
  code = work.compile.wait()
  work.data.join()
  work.compile_timer.join()  # it records the moment the child ended
  section["phases"]["compile"] = {"seconds": work.compile_s, "exit_code": code}
  data = work.data
  section["phases"]["data"] = {"status": data.status, "seconds": round(data.seconds or 0, 1),
                               **data.parts}
  session.log(f"data: {data.status} ({data.seconds or 0:.0f} s); compile: exit {code}")
  session.write()
  if data.status is None or not data.status.startswith("ready"):
    section["status"] = f"no data: {data.status}"
    return None
  run_dir = session.results / row["run"]
  stop_after = session.left() - PACK_RESERVE_S
  if stop_after < 30:
    section["status"] = f"out of time before training ({session.left():.0f} s left)"
    return None
  cmd = lra(*work.args, "--data-dir", str(session.data_dir), "--run-dir", str(run_dir), "--quiet",
            "--stop-after", f"{stop_after:.0f}")
  began = time.monotonic()
  training = session.child(cmd, "run.log")
  following = None
  if session.args.max_rows is None or len(session.report["rows"]) < session.args.max_rows:
    nxt = session.next_row(skip=row["id"])
    if nxt is not None and session.args.quick and ledger.parsed(nxt).task not in QUICK_SPEC:
      nxt = None  # --quick has no small recipe for its task
    if nxt is not None:  # its data and compiled steps, made while this row trains
      following = RowWork(session, nxt)
      following.start_compile()
  code = training.wait()
  summary = metrics_summary(run_dir, state["step"] or 0)
  section["phases"]["run"] = {"seconds": round(time.monotonic() - began, 1), "exit_code": code,
                              "command": shlex.join(["lra", *cmd[3:]]).replace(
                                  str(session.work), ".rows")}
  section.update(step_before=state["step"], **summary)
  session.log(f"run: exit {code}, step {state['step']} -> {summary['step']}")
  stopped = summary["status"] in ledger.STOPPED
  if code not in (0, 130):
    section["status"] = f"the run failed (exit {code}; see .rows/run.log)"
    section["run_log_tail"] = (session.work / "run.log").read_text()[-2000:]
  if stopped:  # adopting records the stop, so that later loans skip the row
    section["final"] = json.loads((run_dir / "final.json").read_text())
    from lra.report import run_summary
    section["status"] = (run_summary.state_text(section["final"]) + ": not retried by later "
                         "loans once adopted")
  if code in (0, 130) or stopped:
    from lra.runs import pack
    began = time.monotonic()
    name = "-".join(row["run"].split("/")[1:]) + ".pack"  # letters, digits, '.', '_', '-'
    try:
      written = pack.pack(run_dir, session.out / _safe(name))
    except pack.PackError as error:
      if not stopped:
        raise
      section["phases"]["pack"] = {"skipped": str(error)}  # adopting writes its final.json
    else:
      section["phases"]["pack"] = {"seconds": round(time.monotonic() - began, 1)}
      section["archive"] = [{"file": p.name, "bytes": p.stat().st_size} for p in written]
      if not stopped:
        section["status"] = (f"{summary['status']} at step {summary['step']:,} of "
                             f"{summary['num_steps']:,}")
  session.write()
  if summary["status"] == "complete" or stopped:  # done with for this call: the next may run
    session.finished.append(row["id"])
    room = len(list(session.out.iterdir())) + 2 <= OUT_FILES_MAX
    if following is not None and session.left() >= NEXT_ROW_MIN_S and room:
      return following
  if following is not None:
    following.cancel()
  return None


def _safe(name: str) -> str:
  return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


# ---------------------------------------------------------------------------------------------
# Back on the session's machine.

def adopt(out: Path, results_dir: Path) -> list[Path]:
  """Moves each archive in OUT into its row's run folder as run.pack (or its parts), replacing
  the old one, and copies the run files beside it; a row stopped without an archive gets its
  final.json (so later loans skip it). Returns what changed."""
  report = json.loads((out / "rows.json").read_text())
  # An older rows.json of one row is its own section.
  sections = [s for s in report.get("rows", [report]) if s.get("archive") or s.get("final")]
  if not sections:
    raise ValueError(f"{out / 'rows.json'}: this call packed no archive ({report.get('status')})")
  changed = []
  for section in sections:
    if section.get("archive"):
      changed += _adopt_archive(out / section["archive"][0]["file"], results_dir)
    else:
      from lra.runs import writers
      target = results_dir / section["run"] / "final.json"
      target.parent.mkdir(parents=True, exist_ok=True)
      writers.write_json_atomic(target, section["final"])
      changed.append(target)
  return changed


def _adopt_archive(first: Path, results_dir: Path) -> list[Path]:
  from lra.report import ledger
  from lra.runs import pack
  manifest = pack.read_manifest(first)
  target = results_dir / manifest["run"]
  changed = []
  with tempfile.TemporaryDirectory(prefix=".adopt-", dir=results_dir) as scratch:
    pack.unpack(first, Path(scratch))  # checks every file before anything moves
    for name in pack.RUN_FILES:
      source = Path(scratch) / manifest["run"] / name
      if source.exists():
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target / name)
        changed.append(target / name)
  # The new archive in full under temporary names first: an error meanwhile leaves the committed
  # one as it was.
  written = []
  try:
    for part in pack.parts_of(first):
      final = target / (ledger.ARCHIVE + part.name[len(first.name.split(".pack")[0] + ".pack"):])
      written.append((final.with_name(final.name + ".tmp"), final))
      shutil.copyfile(part, written[-1][0])
  except BaseException:
    for temporary, _ in written:
      temporary.unlink(missing_ok=True)
    raise
  return changed + pack.install(written, target / ledger.ARCHIVE)


# ---------------------------------------------------------------------------------------------
# Report.

def render(report: dict[str, Any]) -> str:
  from lra.report.table_rules import decimals

  def pct(x):
    return "-" if x is None else f"{decimals(100 * x)}%"
  lines = ["# Paper rows on a lent GPU", ""]
  if report.get("quick"):
    lines += ["**A `--quick` run**: tiny sizes that show the report's format.", ""]
  lines += [f"`{report['command']}`: budget {report['budget_s']:.0f} s, used "
            f"{report.get('wall_s', 0):.0f} s. Status: {report.get('status', 'running')}."]
  if report.get("skipped"):
    lines += ["", "Skipped as stopped (diverged or failed; not retried: rerunning one repeats the "
              "same steps from the same state; to retry one after a look at its run folder, "
              "remove its final.json):"]
    lines += [f"- {entry['row']}: {entry['state']}" for entry in report["skipped"]]
  for section in report.get("rows", []):
    lines += ["", f"## {section['row']}: {section.get('status', 'running')}", "",
              f"- Row: `{section['row_command']}` ({section['run']}), on "
              f"{section.get('device')} with JAX {section.get('jax')}",
              f"- Steps: {section.get('step_before')} -> {section.get('step')} of "
              f"{section.get('num_steps')}; {section.get('steps_per_s') or 0:.1f} steps/s "
              "(median of this call's log windows after the first)",
              f"- Best so far: {pct(section.get('test_accuracy'))} test at the best val step "
              f"{section.get('best_step')} (val {pct(section.get('val_accuracy'))}); best test "
              f"{pct(section.get('best_test_accuracy'))}"]
    for name, phase in section.get("phases", {}).items():
      lines.append(f"- {name}: " + ", ".join(f"{k} {v}" for k, v in phase.items()))
    for entry in section.get("archive", []):
      lines.append(f"- Archive: {entry['file']} ({entry['bytes'] / 2**20:.1f} MiB)")
  if report.get("next"):
    lines += ["", f"Next: {report['next']}"]
  return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", type=Path, help="where the archive and rows.md|json go")
  parser.add_argument("--budget-s", type=float, default=420, help="wall time of the whole call")
  parser.add_argument("--probe", action="store_true", help="run tools/step_probe.py first")
  parser.add_argument("--probe-budget-s", type=float, default=240)
  parser.add_argument("--quick", action="store_true", help="tiny sizes, for a CPU")
  parser.add_argument("--max-rows", type=int, help="advance at most this many rows (default: "
                      "each completed row hands what is left of the budget to the next)")
  parser.add_argument("--results-dir", type=Path, default=REPO / "results",
                      help="the committed results: the ledger and the rows' archives")
  parser.add_argument("--work", type=Path, default=REPO / ".rows",
                      help="working folder (kept between calls to a warm machine)")
  parser.add_argument("--adopt", type=Path, metavar="OUT", help="put OUT's archive and run files "
                      "in their row's run folder under --results-dir")
  parser.add_argument("--warm-up", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  args.argv = list(sys.argv[1:] if argv is None else argv)
  if not (args.adopt or args.warm_up or args.out):
    parser.error("--out OUT is needed (or --adopt OUT)")
  return args


def main(argv: list[str] | None = None) -> int:
  args = parse_args(argv)
  if args.warm_up:
    warm = json.loads(args.warm_up)
    warm_up(warm["args"], warm["spec"])
    return 0
  if args.adopt:
    for path in adopt(args.adopt, args.results_dir):
      print(f"wrote {path}")
    return 0
  session = Session(args)
  try:
    advance(session)
  finally:
    session.write()
  print(render(session.report))
  sections = session.report["rows"]
  return 0 if not sections or any(s.get("archive") or s.get("final") for s in sections) else 1


if __name__ == "__main__":
  sys.exit(main())
