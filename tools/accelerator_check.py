"""One prepared check of the suite on the accelerator it finds, in a fixed wall-time budget.

  python tools/accelerator_check.py                  # 8 minutes on the GPU/TPU JAX finds
  python tools/accelerator_check.py --quick          # small sizes: a CPU try-out in minutes
  bash tools/accelerator_check.sh OUT [COMMIT]       # the device tool's one command

Phases, each ending by its share of --budget-s (time a phase leaves goes to the next; --phases
picks some, and they share the whole budget):
  tests  the `gpu`-marked tests and the mixer tests (pytest), each test's outcome kept by name;
  bench  `lra bench` on a fixed grid: every registered mixer at T=1K, then at 4K, one process per
         record, out-of-memory records as `oom`, XLA's log in xla.log;
  run    a ~3-minute slice of `lra run listops latte --preset paper` (steps/s, its first
         evaluations); the ListOps data is generated and prepared on the host CPU from the start,
         while the tests and the bench use the accelerator;
  probe  tools/pathfinder_probe.py --model resnet18 for the time left (skipped, with the reason,
         where that probe or its data is missing).
  steps  (only when --phases names it; first) tools/step_probe.py: the paper ListOps Latte step
         timed per lever (dropout generators, bf16, dropout 0), its XLA costs and a trace.
It writes report.md and report.json (device, versions, commit, every phase's results, partial
ones included) and the phases' logs into one folder, default results/accelerator/<date>_<device>/;
the report is rewritten after every phase, so a check stopped from outside still leaves one.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PHASES = ("tests", "bench", "run", "probe")
OPTIONAL_PHASES = ("steps",)  # run only when --phases names them, before the others
# Each phase's share of the budget; a phase must end by the sum of its own and the earlier
# phases' shares, counted from the start.
SHARES = {"tests": 0.2, "bench": 0.3, "run": 0.35, "probe": 0.15, "steps": 0.5}
RESERVE_S = 10  # for the last report after the last phase
# The files of the GPU run of 2026-11-26 (7 failures among them, names lost) and the cores of
# issue 81's four mixers; tests/*.py naming a registered mixer and files with `gpu`-marked tests
# are added to these.
MIXER_TESTS = ("test_mixer_cores.py", "test_mixer_contract.py", "test_encoder_block.py",
               "test_batching.py", "test_dropout_rng.py", "test_lra_mixers.py")
# LRA's Pathfinder-32 hard set size: 2 min to generate and prepare on 2 cores, 109 s on the H200
# host's 8 workers while the tests ran (results/accelerator/README.md).
PATHFINDER_IMAGES = 200_000
PROBE_FLAGS = ("--model resnet18", "--time-budget-s", "--quick")
VERSIONS = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "ml_collections", "numpy")
SIZES = {
    # The Text model of `lra bench` (the Latte paper's Text protocol) and LRA's ListOps data.
    "full": dict(
        tests=None, bench=dict(lengths=(1024, 4096), batch_size=32, dim=256, num_layers=6,
                               num_heads=4, num_steps=3, warmup_steps=1, min_time_s=0.5,
                               matmul_n=None),
        run_s=180, run_overrides=(), generate=()),
    "quick": dict(
        tests=("tests/test_mixer_cores.py::test_core_matches_naive_formula",
               "tests/test_mixer_cores.py::test_linear_matches_naive_formula"),
        bench=dict(lengths=(128,), batch_size=2, dim=16, num_layers=1, num_heads=2, num_steps=2,
                   warmup_steps=1, min_time_s=0.0, matmul_n=128),
        run_s=60, run_overrides=("model.num_layers=1", "model.dim=32", "model.mlp_dim=64",
                                 "train.batch_size=16", "train.log_every_steps=10",
                                 "eval.every_steps=200"),
        generate=("--num-train", "512", "--num-val", "64", "--num-test", "64", "--min-length",
                  "8", "--max-length", "80", "--max-depth", "4", "--max-args", "5")),
}


# ---------------------------------------------------------------------------------------------
# Environment: what ran, on what.

def environment() -> dict[str, Any]:
  """The device JAX finds, its memory, the matmul precision in force and the versions (run in a
  fresh process, so this one never holds the accelerator)."""
  import jax
  device = jax.devices()[0]
  stats = device.memory_stats() if device.platform != "cpu" else None
  versions = {}
  for name in VERSIONS:
    try:
      versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      versions[name] = None
  return {"platform": device.platform, "device_kind": getattr(device, "device_kind", ""),
          "device_count": jax.device_count(), "python": platform.python_version(),
          "memory_bytes": (stats or {}).get("bytes_limit"), "versions": versions,
          "matmul_precision": str(jax.config.jax_default_matmul_precision or "default"),
          "host_cpus": os.cpu_count(), "jax_info": jax.print_environment_info(return_string=True)}


def git_commit() -> str:
  try:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return "unknown (no git checkout here: pass --commit)"


def device_slug(env: dict[str, Any]) -> str:
  name = env.get("device_kind") or env.get("platform") or "unknown"
  return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


# ---------------------------------------------------------------------------------------------
# Processes this check starts, stopped by their own process group at a deadline.

class Children:
  """The subprocesses this check started; each leads its own process group (pytest's workers,
  the run's data loader), so stopping one stops everything it started."""

  def __init__(self):
    self.alive: list[subprocess.Popen] = []

  def start(self, cmd: list[str], log: Path, env: dict[str, str] | None = None
            ) -> subprocess.Popen:
    with open(log, "a") as f:
      proc = subprocess.Popen(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT,
                              env={**os.environ, **(env or {})}, start_new_session=True)
    self.alive.append(proc)
    return proc

  def wait(self, proc: subprocess.Popen, deadline: float, grace_s: float = 5) -> bool:
    """Waits for `proc` until `deadline` (time.monotonic()); past it, SIGTERM (a run saves and
    stops), then SIGKILL after `grace_s`. True if it ended on its own."""
    try:
      proc.wait(timeout=max(0.0, deadline - time.monotonic()))
      return True
    except subprocess.TimeoutExpired:
      self.stop(proc, grace_s)
      return False

  def stop(self, proc: subprocess.Popen, grace_s: float = 5) -> None:
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
      if proc.poll() is not None:
        break
      try:
        os.killpg(proc.pid, sig)
      except ProcessLookupError:
        break
      try:
        proc.wait(timeout=wait_s)
      except subprocess.TimeoutExpired:
        pass

  def stop_all(self) -> None:
    for proc in self.alive:
      self.stop(proc, 2)


# ---------------------------------------------------------------------------------------------
# Phase a: tests.

def test_files(sizes: dict[str, Any], chosen: str | None = None) -> list[str]:
  """`chosen` (comma-separated), the quick selection, or the mixer tests plus every file with
  `gpu`-marked tests."""
  if chosen:
    return chosen.split(",")
  if sizes["tests"]:
    return list(sizes["tests"])
  from lra.models.mixers import MIXERS
  files = []
  for path in sorted((REPO / "tests").glob("test_*.py")):
    text = path.read_text()
    if (path.name in MIXER_TESTS or "mark.gpu" in text
        or any(name in path.stem.split("test_", 1)[1] for name in MIXERS)):
      files.append(f"tests/{path.name}")
  return files


def read_outcomes(path: Path) -> dict[str, Any]:
  """tools/check_outcomes.py's lines -> counts, failing tests with their messages, the tests
  running when time ran out and how many collected tests never started."""
  collected, started, final = [], [], {}
  rank = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
  for line in path.read_text().splitlines() if path.exists() else []:
    entry = json.loads(line)
    if "collected" in entry:
      collected = list(dict.fromkeys(collected + entry["collected"]))
    elif "start" in entry:
      started.append(entry["start"])
    else:
      outcome = ("error" if entry["outcome"] == "failed" and entry["when"] != "call"
                 else entry["outcome"])
      old = final.get(entry["id"])
      if old is None or rank[outcome] > rank[old["outcome"]]:
        final[entry["id"]] = {"outcome": outcome, "message": entry["message"]}
  counts = {k: sum(v["outcome"] == k for v in final.values()) for k in rank}
  running = [t for t in dict.fromkeys(started) if t not in final]
  return {"collected": len(collected), "counts": counts,
          "failures": [{"id": t, **v} for t, v in final.items()
                       if v["outcome"] in ("failed", "error")],
          "running_at_stop": running,
          "not_started": sum(t not in final and t not in running for t in collected)}


def phase_tests(ctx: Check, deadline: float) -> dict[str, Any]:
  files = test_files(ctx.sizes, ctx.args.tests)
  outcomes = ctx.work / "tests.jsonl"
  marks = "not slow and not gpu" if ctx.env.get("platform") == "cpu" else "gpu or not slow"
  cmd = [sys.executable, "-m", "pytest", "-p", "check_outcomes", "-q", "-m", marks, *files]
  if not ctx.quick and importlib.util.find_spec("xdist"):
    cmd += ["-n", str(min(8, os.cpu_count() or 1))]
  if importlib.util.find_spec("pytest_timeout"):
    cmd += ["--timeout", "120"]  # one hung test must not take the whole slice
  path = os.pathsep.join(filter(None, [str(REPO / "tools"), os.environ.get("PYTHONPATH")]))
  proc = ctx.children.start(cmd, ctx.out / "tests.log",
                            {"PYTHONPATH": path, "LRA_CHECK_OUTCOMES": str(outcomes)})
  finished = ctx.children.wait(proc, deadline)
  result = {"command": "python " + shlex.join(cmd[1:]), "files": files,
            "exit_code": proc.returncode, **read_outcomes(outcomes)}
  result["status"] = "done" if finished else "partial: stopped at its time limit"
  return result


# ---------------------------------------------------------------------------------------------
# Phase b: step_time.

def phase_bench(ctx: Check, deadline: float) -> dict[str, Any]:
  from lra.bench import step_time
  grid = ctx.sizes["bench"]
  mixers = step_time.all_mixers()
  records = step_time.run_bench(mixers, grid["lengths"], grid["batch_size"], dim=grid["dim"],
                            num_layers=grid["num_layers"], num_heads=grid["num_heads"],
                            num_steps=grid["num_steps"], warmup_steps=grid["warmup_steps"],
                            min_time_s=grid["min_time_s"], matmul_n=grid["matmul_n"],
                            isolate=True, xla_log=ctx.out / "xla.log", deadline=deadline,
                            by_length=True, log=lambda line: ctx.say("  " + line))
  done = sum(not r["status"].startswith(("timeout", "not run")) for r in records)
  return {"grid": {**grid, "mixers": mixers}, "records": records,
          "matmul_peak_flops_per_s": records[0]["matmul_peak_flops_per_s"] if records else None,
          "status": "done" if done == len(records) else
          f"partial: {done} of {len(records)} records before its time limit"}


# ---------------------------------------------------------------------------------------------
# Phase c: a slice of the ListOps paper run, its data made on the host CPU meanwhile.

class HostData(threading.Thread):
  """`lra data generate TASK` then `lra data prepare TASK` into `data_dir`/TASK, in the
  background on the host CPU while the accelerator runs other phases; `status` is None while
  running, then "ready" or what failed."""

  def __init__(self, ctx: Check, task: str, generate: tuple[str, ...]):
    super().__init__(daemon=True)
    self.ctx, self.task, self.generate = ctx, task, generate
    self.status, self.seconds = None, None
    self.data_dir = ctx.work / f"{task}_data"
    self.cache = self.data_dir / task  # prepare's default cache name is the task's

  def run(self) -> None:
    began, raw = time.monotonic(), self.ctx.work / f"{self.task}_raw"
    lra = [sys.executable, "-m", "lra"]
    for cmd in ([*lra, "data", "generate", self.task, "--out", str(raw), *self.generate],
                [*lra, "data", "prepare", self.task, "--source", str(raw), "--data-dir",
                 str(self.data_dir)]):
      proc = self.ctx.children.start(cmd, self.ctx.out / "data.log")
      if proc.wait() != 0:
        self.status = f"`{shlex.join(cmd[2:5])}` failed (exit {proc.returncode}; see data.log)"
        break
    else:
      self.status = "ready"
    self.seconds = time.monotonic() - began


def summarise_run(run_dir: Path) -> dict[str, Any]:
  """steps/s (median of the logged rates after the first, which includes compiling) and the
  evaluations of a run folder's metrics.jsonl, with final.json's status."""
  rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
          ] if (run_dir / "metrics.jsonl").exists() else []
  rates = [r["train/steps_per_s"] for r in rows if "train/steps_per_s" in r]
  final = (json.loads((run_dir / "final.json").read_text())
           if (run_dir / "final.json").exists() else {})
  return {"steps_per_s": statistics.median(rates[1:] or rates) if rates else None,
          "last_step": max((r["step"] for r in rows), default=0),
          "evals": [{"step": r["step"], "val_accuracy": r.get("val/accuracy"),
                     "test_accuracy": r.get("test/accuracy")} for r in rows
                    if "val/accuracy" in r],
          "final_status": final.get("status"), "final_step": final.get("step")}


def phase_run(ctx: Check, deadline: float) -> dict[str, Any]:
  data = ctx.listops
  data.join(timeout=max(0.0, deadline - time.monotonic() - 30))
  if data.status != "ready":
    why = data.status or "still being generated at this phase's time limit"
    return {"status": f"skipped: ListOps data {why}"}
  run_dir = ctx.work / "run"
  cmd = [sys.executable, "-m", "lra", "run", "listops", "latte", "--preset", "paper",
         "--data-dir", str(data.data_dir), "--run-dir", str(run_dir), "--quiet",
         *(f"--config.{o}" for o in ctx.sizes["run_overrides"])]
  began = time.monotonic()
  proc = ctx.children.start(cmd, ctx.out / "run.log")
  # SIGTERM at the end of the slice: the run saves a checkpoint and writes final.json.
  stop_at = min(began + ctx.sizes["run_s"], deadline - 20)
  ended = ctx.children.wait(proc, stop_at, grace_s=15)
  status = ("done: stopped at the end of its slice" if not ended else "done: complete"
            if proc.returncode == 0 else f"failed (exit {proc.returncode}; see run.log)")
  return {"command": "lra " + shlex.join(cmd[3:]).replace(str(ctx.work), "<tmp>"),
          "data_seconds": data.seconds, "seconds": time.monotonic() - began,
          "exit_code": proc.returncode, **summarise_run(run_dir), "status": status}


# ---------------------------------------------------------------------------------------------
# Phase d: the Pathfinder probe.

def probe_missing(help_text: str) -> list[str]:
  """The flags this check passes that tools/pathfinder_probe.py's --help does not offer."""
  words = set(re.findall(r"[\w-]+", help_text))  # "--model {dilated,resnet18}" has both
  return [flag for flag in PROBE_FLAGS if not set(flag.split()) <= words]


def probe_help() -> str:
  return subprocess.run([sys.executable, str(REPO / "tools" / "pathfinder_probe.py"), "--help"],
                        cwd=REPO, capture_output=True, text=True).stdout


def phase_probe(ctx: Check, deadline: float) -> dict[str, Any]:
  missing = probe_missing(probe_help())
  if missing:
    return {"status": "skipped: tools/pathfinder_probe.py has no " + ", ".join(missing)
            + " on this checkout"}
  extra: dict[str, Any] = {}
  cache = ctx.args.pathfinder_cache
  if ctx.pathfinder:
    made = ctx.pathfinder
    made.join(timeout=max(0.0, deadline - time.monotonic() - 60))
    if made.status != "ready":
      why = made.status or "still being generated at this phase's time limit"
      return {"status": f"skipped: Pathfinder data {why}"}
    cache, extra["data_seconds"] = made.cache, made.seconds
  data = (["--quick"] if ctx.quick and not cache else []) + (
      ["--cache", str(cache)] if cache else [])
  data += shlex.split(ctx.args.probe_args or "")
  if not data:
    return {"status": "skipped: no Pathfinder data (pass --pathfinder-generate N, "
                      "--pathfinder-cache DIR or --probe-args)"}
  budget = int(deadline - time.monotonic() - 30)  # its evaluation and files after training
  if budget < 20:
    return {"status": "skipped: too little time left"}
  out = ctx.work / "probe.json"
  cmd = [sys.executable, "tools/pathfinder_probe.py", "--model", "resnet18", "--time-budget-s",
         str(budget), "--out", str(out), *data]
  proc = ctx.children.start(cmd, ctx.out / "probe.log")
  finished = ctx.children.wait(proc, deadline)
  curve = []
  for line in (ctx.out / "probe.log").read_text().splitlines():
    if line.startswith("{"):
      try:
        curve.append(json.loads(line))
      except json.JSONDecodeError:
        pass
  result = json.loads(out.read_text()) if out.exists() else {"curve": curve}
  return {**result, **extra, "exit_code": proc.returncode,
          "command": shlex.join(cmd[1:]).replace(str(ctx.work), "<tmp>"),
          "status": "done" if finished and proc.returncode == 0 else
          "partial: stopped at its time limit" if not finished else
          f"failed (exit {proc.returncode}; see probe.log)"}


# ---------------------------------------------------------------------------------------------
# Phase e (opt-in): the step probe.

def phase_steps(ctx: Check, deadline: float) -> dict[str, Any]:
  """tools/step_probe.py in its own process (the accelerator is free again after it), writing
  step_probe.json and step_probe.md beside the report."""
  budget = int(deadline - time.monotonic() - 10)
  if budget < 30:
    return {"status": "skipped: too little time left"}
  cmd = [sys.executable, str(REPO / "tools" / "step_probe.py"), "--out", str(ctx.out),
         "--budget-s", str(budget), *(["--quick"] if ctx.quick else [])]
  proc = ctx.children.start(cmd, ctx.out / "steps.log")
  finished = ctx.children.wait(proc, deadline)
  path = ctx.out / "step_probe.json"
  probe = json.loads(path.read_text()) if path.exists() else {}
  ran = [v for v in probe.get("variants", []) if v.get("status") == "ok"]
  return {"command": "python " + shlex.join(cmd[1:]).replace(str(REPO) + "/", ""),
          "variants": [{k: v.get(k) for k in ("variant", "status", "steps_per_s", "compile_s",
                                               "tb_per_s")} for v in probe.get("variants", [])],
          "decision": probe.get("decision", []), "exit_code": proc.returncode,
          "status": ("done" if finished and proc.returncode == 0 else
                     "partial: stopped at its time limit" if not finished else
                     f"failed (exit {proc.returncode}; see steps.log)")
          + ("" if ran else ": no variant timed")}


def _steps_md(p: dict[str, Any]) -> list[str]:
  lines = [f"`{p['command']}`; the whole report: step_probe.md.", "",
           "| variant | status | steps/s | compile s | TB/s |", "|---|---|---:|---:|---:|"]
  lines += [f"| {v['variant']} | {v['status']} | {_n(v.get('steps_per_s'), '.2f')} | "
            f"{_n(v.get('compile_s'), '.1f')} | {_n(v.get('tb_per_s'), '.3f')} |"
            for v in p["variants"]]
  return lines + [""] + [f"- {line}" for line in p["decision"]]


# ---------------------------------------------------------------------------------------------
# The check and its report.

class Check:
  """One check: its options, sizes, deadlines, child processes and the report so far."""

  def __init__(self, args: argparse.Namespace):
    self.args, self.quick = args, args.quick
    self.sizes = SIZES["quick" if args.quick else "full"]
    self.start = time.monotonic()
    self.phases = [p for p in (*OPTIONAL_PHASES, *PHASES) if p in args.phases.split(",")]
    self.children = Children()
    self.work = Path(tempfile.mkdtemp(prefix="lra_check_"))
    self.env: dict[str, Any] = {}
    self.out = self.work  # until the device is known
    self.report: dict[str, Any] = {}
    self.listops = HostData(self, "listops", self.sizes["generate"])
    # LRA's Pathfinder-32 "hard" set (contour length 14), made by the host's spare cores.
    self.pathfinder = (HostData(self, "pathfinder", (
        "--resolution", "32", "--difficulty", "hard", "--num-images",
        str(args.pathfinder_generate), "--workers", str(max(1, (os.cpu_count() or 2) // 2))))
        if args.pathfinder_generate else None)

  def deadline(self, phase: str) -> float:
    """When `phase` must end (time.monotonic()): the selected phases share the whole budget."""
    mine = self.phases[:self.phases.index(phase) + 1]
    share = sum(SHARES[p] for p in mine) / sum(SHARES[p] for p in self.phases)
    return self.start + share * self.args.budget_s - (
        RESERVE_S if phase == self.phases[-1] else 0)

  def say(self, line: str) -> None:
    print(line, flush=True)

  def write(self) -> None:
    self.report["wall_s"] = round(time.monotonic() - self.start, 1)
    (self.out / "report.json").write_text(json.dumps(self.report, indent=1, default=str) + "\n")
    (self.out / "report.md").write_text(render(self.report))


def run_check(args: argparse.Namespace) -> Path:
  check = Check(args)
  from lra.machine.isolated import call_isolated
  env, error, _ = call_isolated(environment, {}, timeout_s=120)
  check.env = env or {"error": error}
  date = datetime.datetime.now(datetime.UTC)
  quick = "_quick" if args.quick else ""
  check.out = args.out or (REPO / "results" / "accelerator" /
                           f"{date:%Y-%m-%d}_{device_slug(check.env)}{quick}")
  check.out.mkdir(parents=True, exist_ok=True)
  check.report = {
      "date": f"{date:%Y-%m-%d %H:%M} UTC", "quick": args.quick, "budget_s": args.budget_s,
      "command": "python tools/accelerator_check.py " + shlex.join(args.argv),
      "commit": args.commit or git_commit(), "note": args.note, "environment": check.env,
      "phases": {}}
  check.say(f"accelerator check: {check.env.get('platform')}:{check.env.get('device_kind')} "
            f"({check.env.get('error', 'ok')}), budget {args.budget_s:.0f} s -> {check.out}")
  check.write()
  if "run" in check.phases:
    check.listops.start()
  if "probe" in check.phases and check.pathfinder:
    check.pathfinder.start()
  runners = {"tests": phase_tests, "bench": phase_bench, "run": phase_run, "probe": phase_probe,
             "steps": phase_steps}
  try:
    for name in check.phases:
      deadline = check.deadline(name)
      began = time.monotonic()
      check.say(f"{name}: until +{deadline - check.start:.0f} s")
      if "error" in check.env:
        result = {"status": f"skipped: JAX did not start ({check.env['error'][:150]})"}
      elif deadline - began < 5:
        result = {"status": "skipped: out of time"}
      else:
        try:
          result = runners[name](check, deadline)
        except Exception as e:  # noqa: BLE001 - one phase's fault must not lose the others
          result = {"status": f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"}
      result["seconds"] = round(time.monotonic() - began, 1)
      check.report["phases"][name] = result
      check.say(f"{name}: {result['status']} ({result['seconds']:.0f} s)")
      check.write()
  finally:
    check.children.stop_all()
    check.write()
    shutil.rmtree(check.work, ignore_errors=True)  # the generated data and the run's checkpoints
  return check.out


# ---------------------------------------------------------------------------------------------
# Markdown.

def _n(x, fmt: str, scale: float = 1.0) -> str:
  return "-" if x is None else format(x * scale, fmt)


def render(report: dict[str, Any]) -> str:
  """report.json as Markdown: what ran where, then one section per phase."""
  env, phases = report.get("environment", {}), report.get("phases", {})
  versions = env.get("versions") or {}
  lines = [f"# Accelerator check: {env.get('platform', '?')}:{env.get('device_kind', '?')}, "
           f"{report.get('date', '')}", ""]
  if report.get("quick"):
    lines += [f"**A `--quick` run on {env.get('platform', '?')}**: small sizes that show the "
              "report's format; none of its numbers says how fast an accelerator is.", ""]
  if report.get("note"):
    lines += [report["note"], ""]
  lines += [
      f"Made by `{report.get('command')}` at commit {report.get('commit')}; budget "
      f"{report.get('budget_s', 0):.0f} s, used {report.get('wall_s', 0):.0f} s. Each phase "
      "ends by its share of the budget; `partial` marks one cut there, with what it had done.",
      "", "| device | count | memory GiB | matmul precision | python | "
      + " | ".join(VERSIONS) + " |", "|---" * (5 + len(VERSIONS)) + "|",
      f"| {env.get('platform', '?')}:{env.get('device_kind', '?')} | "
      f"{env.get('device_count', '-')} | {_n(env.get('memory_bytes'), '.1f', 2**-30)} | "
      f"{env.get('matmul_precision', '-')} | {env.get('python', '-')} | "
      + " | ".join(str(versions.get(v) or "-") for v in VERSIONS) + " |", ""]
  if "error" in env:
    lines += [f"JAX found no device: {env['error']}", ""]
  renderers = {"tests": _tests_md, "bench": _bench_md, "run": _run_md, "probe": _probe_md,
               "steps": _steps_md}
  for name in (*OPTIONAL_PHASES, *PHASES):
    if name in phases:
      p = phases[name]
      lines += [f"## {name}: {p['status']} ({p.get('seconds', 0):.0f} s)", ""]
      if not p["status"].startswith(("skipped", "failed")):
        lines += renderers[name](p) + [""]
  return "\n".join(lines).rstrip() + "\n"


def _tests_md(p: dict[str, Any]) -> list[str]:
  c = p["counts"]
  lines = [f"`{p['command']}`", "",
           f"{p['collected']} collected: {c['passed']} passed, {c['failed']} failed, "
           f"{c['error']} errors, {c['skipped']} skipped, {len(p['running_at_stop'])} running "
           f"at the stop, {p['not_started']} not started."]
  if p["failures"]:
    lines += ["", "| failing test | outcome | message |", "|---|---|---|"]
    lines += [f"| `{f['id']}` | {f['outcome']} | {f['message'].replace('|', '/')} |"
              for f in p["failures"]]
  if p["running_at_stop"]:
    lines += ["", "Running when time ran out: " + ", ".join(f"`{t}`"
                                                            for t in p["running_at_stop"])]
  return lines


def _bench_md(p: dict[str, Any]) -> list[str]:
  g = p["grid"]
  lines = [f"{g['num_layers']} layers, D={g['dim']}, {g['num_heads']} heads, batch "
           f"{g['batch_size']}; one process per record, XLA's log in xla.log. ms: median "
           "train step (forward, backward, AdamW). An f32 matmul at the default precision: "
           f"{_n(p.get('matmul_peak_flops_per_s'), '.3g', 1e-12)} TFLOP/s.", "",
           "| mixer | path | T | status | ms | tokens/s | peak GiB | compile s |",
           "|---|---|---:|---|---:|---:|---:|---:|"]
  for r in p["records"]:
    status = r["status"] + (f" ({r['oom_detail']})" if r.get("oom_detail") else "")
    lines.append(
        f"| {r['mixer']} | {r.get('execution_path') or '-'} | {r['seq_len']} | "
        f"{status.replace('|', '/')} | {_n(r.get('time_ms'), '.1f')} | "
        f"{_n(r.get('tokens_per_s'), '.0f')} | {_n(r.get('peak_bytes'), '.2f', 2**-30)} | "
        f"{_n(r.get('compile_s'), '.1f')} |")
  return lines


def _run_md(p: dict[str, Any]) -> list[str]:
  lines = [f"`{p['command']}`: {_n(p['steps_per_s'], '.1f')} steps/s (median after the first "
           f"log), step {max(p['last_step'], p['final_step'] or 0)} after {p['seconds']:.0f} s; "
           "data generated and "
           f"prepared in {_n(p['data_seconds'], '.0f')} s; final.json: "
           f"{p['final_status'] or '-'}.", ""]
  if p["evals"]:
    lines += ["| step | val accuracy | test accuracy |", "|---:|---:|---:|"]
    lines += [f"| {e['step']} | {_n(e['val_accuracy'], '.2%')} | "
              f"{_n(e['test_accuracy'], '.2%')} |" for e in p["evals"]]
  return lines


def _probe_md(p: dict[str, Any]) -> list[str]:
  curve = p.get("curve") or []
  lines = [f"`{p.get('command')}`" + (f"; its data generated and prepared on the host in "
                                      f"{p['data_seconds']:.0f} s" if p.get("data_seconds")
                                      else ""), ""]
  if curve:
    keys = [k for k in curve[0] if isinstance(curve[0][k], (int, float))]
    lines += ["| " + " | ".join(keys) + " |", "|" + "---:|" * len(keys)]
    lines += ["| " + " | ".join(str(e.get(k, "-")) for k in keys) + " |" for e in curve]
  return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true", help="small sizes (a CPU try-out)")
  parser.add_argument("--budget-s", type=float, default=480, help="wall time for all phases")
  parser.add_argument("--out", type=Path, help="report folder (default "
                      "results/accelerator/<date>_<device>[_quick])")
  parser.add_argument("--phases", default=",".join(PHASES), help="a subset of "
                      + ",".join(PHASES) + ", or steps (the step probe; never by default)")
  parser.add_argument("--commit", help="the commit checked (default: git rev-parse HEAD)")
  parser.add_argument("--pathfinder-cache", type=Path, help="a prepared Pathfinder cache for "
                      "the probe")
  parser.add_argument("--tests", help="comma-separated test files or ids for the tests phase "
                      "(default: the gpu-marked and mixer test files)")
  parser.add_argument("--pathfinder-generate", type=int, metavar="N",
                      help="generate and prepare N hard Pathfinder-32 images on the host CPU "
                      "(half its cores, from the check's start) for the probe (default: "
                      f"{PATHFINDER_IMAGES:,} unless --quick, --pathfinder-cache or "
                      "--probe-args gives the data; 0: none)")
  parser.add_argument("--probe-args", help="more arguments for tools/pathfinder_probe.py")
  parser.add_argument("--note", help="a sentence for the report (where, on whose machine, ...)")
  args = parser.parse_args(argv)
  # The command as recorded: the note is shown on its own.
  args.argv = [a for a in (sys.argv[1:] if argv is None else argv)
               if a != args.note and a != "--note" and not a.startswith("--note=")]
  if args.pathfinder_generate is None:
    given = args.quick or args.pathfinder_cache or args.probe_args
    args.pathfinder_generate = 0 if given else PATHFINDER_IMAGES
  unknown = set(args.phases.split(",")) - set(PHASES) - set(OPTIONAL_PHASES)
  if unknown:
    parser.error(f"--phases: expected some of {','.join(OPTIONAL_PHASES + PHASES)}, found "
                 f"{','.join(unknown)}")
  return args


def main(argv: list[str] | None = None) -> int:
  out = run_check(parse_args(argv))
  print(f"report: {out / 'report.md'}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
