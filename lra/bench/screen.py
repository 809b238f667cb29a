"""The screen: does a mixer mix, and does it learn? Two short runs that take minutes on one core.

  mix    the synthetic task (configs/synthetic.py) at T=128 for 400 steps: the first and last
         real tokens amid noise, read at the CLS output. It mixes if its test accuracy at the best
         val step reaches MIXES_AT, the full synthetic run's pass mark (one end alone gives 25%).
  learn  the fitting screen (lra.bench.fit_screen): 480 Pathfinder images as 4x4 squares for 600
         steps. It learns if its train accuracy over the last 100 steps reaches fit_screen.BAR.

With SPT each part also pretrains on its own inputs for 40% of its steps and fine-tunes for the
rest (configs/common.py SPT_SHARE): the same steps, set against the part from scratch. `lra check
MIXER --screen [--spt]` screens one mixer, with an ETA from a few timed steps first and its place
among the built-in mixers after; `python -m lra.bench.screen --out results/screen` screens the
built-in mixers (the records that comparison reads: screen.json, and README.md from them).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lra import errors
from lra.bench import fit_screen
from lra.report.run_summary import MIXES_AT


@dataclasses.dataclass(frozen=True)
class Part:
  """One of the screen's two runs: `lra run TASK MIXER --preset PRESET` with `settings`."""
  name: str
  task: str
  preset: str
  settings: tuple[str, ...]  # KEY=VALUE, train.num_steps among them
  bar: float
  measure: str               # what the score is, for the lines printed

  @property
  def steps(self) -> int:
    return int(self.setting("train.num_steps"))

  def setting(self, key: str) -> str:
    return next(s.split("=", 1)[1] for s in self.settings if s.startswith(f"{key}="))

  def evaluations(self, steps: int) -> int:
    every = int(self.setting("eval.every_steps"))
    return steps // every + (steps % every != 0)

  def phases(self, spt: bool) -> list[tuple[str, int, list[str]]]:
    """(phase, steps, overrides) of each run: one from scratch, or a pretraining of SPT_SHARE of
    the steps and a fine-tune of the rest. The phases take their steps from the spt block
    (configs/common.py spt_phase), so neither names train.num_steps; the pretraining takes the
    share of the warm-up that block gives it."""
    if not spt:
      return [("scratch", self.steps, list(self.settings))]
    from lra.configs.common import SPT_SHARE  # light: ml_collections only
    pretrain = max(1, round(SPT_SHARE * self.steps))
    warmup = int(self.setting("train.warmup_steps"))
    budget = [f"spt.pretrain_steps={pretrain}", f"spt.finetune_steps={self.steps - pretrain}",
              f"spt.pretrain_warmup_steps={round(SPT_SHARE * warmup)}"]
    kept = [s for s in self.settings if not s.startswith("train.num_steps=")]
    return [("pretrain", pretrain, [s for s in kept if not s.startswith("train.warmup_steps=")]
             + budget[::2] + ["objective=denoise"]),
            ("spt", self.steps - pretrain, kept + budget[1:2])]


SEQ_LEN = 128
# The synthetic task's model (2 layers, D=64) on sequences of 16-128 real tokens, at a rate that
# every built-in mixer that mixes learns by step 250 (2e-3, the task's own, left Latte at 52% val
# there and 100% at 500; results/screen/README.md); Linformer's k = T as in the task's config.
MIX = Part("mix", "synthetic", "paper", (
    f"data.generator.seq_len={SEQ_LEN}", f"data.generator.min_length={SEQ_LEN // 8}",
    f"mixers.linformer.proj_len={SEQ_LEN}", "train.learning_rate=4e-3", "train.num_steps=400",
    "train.warmup_steps=40", "train.log_every_steps=50", "eval.every_steps=200",
    "eval.max_examples=500", "checkpoint.every_steps=400"), MIXES_AT,
    f"test accuracy at the best val step, synthetic task at T={SEQ_LEN} (both ends to the CLS "
    "output)")
LEARN = Part("learn", "pathfinder", "squares", fit_screen.OVERRIDES, fit_screen.BAR,
             f"train accuracy over the last {fit_screen.LAST_STEPS} steps, "
             f"{fit_screen.TRAIN_IMAGES} Pathfinder images as 4x4 squares")
PARTS = (MIX, LEARN)
# What the ETA adds to each run besides its steps: starting it, and evaluating at a share of a
# train step's time per example (a forward pass alone, in larger batches). results/screen/
# README.md sets each built-in mixer's ETA beside the time its screen took.
RUN_START_S = 2.0
EVAL_SHARE = 0.4
PROBE_STEPS = 3
RECORDS = "screen/screen.json"


# ---------------------------------------------------------------------------------------------
# Scores and verdicts.

@dataclasses.dataclass(frozen=True)
class Score:
  """One part's result for one mixer and seed, from scratch or with SPT."""
  part: str
  score: float        # test accuracy at the best val step (mix), train accuracy (learn)
  chance: float
  wall_s: float       # the part's runs (pretraining included), data and compiling included
  cpu_s: float        # this process's CPU time over them: the wall time of a quiet core
  steps_per_s: float  # the (last) run's training speed
  status: str = "complete"  # or "diverged": scored at chance
  stopped: str = ""   # where and why a run diverged

  @property
  def passes(self) -> bool:
    return self.status == "complete" and self.score >= _part(self.part).bar


def _part(name: str) -> Part:
  return next(p for p in PARTS if p.name == name)


def line(score: Score, spt: bool = False) -> str:
  """The part's PASS/FAIL line: the score against its bar, chance and what one end gives."""
  part = _part(score.part)
  word = {"mix": ("mixes", "does not mix"), "learn": ("learns", "does not learn")}[part.name]
  how = " with SPT" if spt else ""
  extra = (f"one end alone gives {math.sqrt(score.chance):.0%}, " if part.name == "mix" else "")
  if score.status != "complete":
    return (f"FAIL  {part.name:<5} {word[1]}{how}: its {score.stopped} (the loss is not "
            "finite: `lra check` above says whether the layer's own output is)")
  steps = " + ".join(f"{n} {phase}" for phase, n, _ in part.phases(True)) if spt else part.steps
  return (f"{'PASS' if score.passes else 'FAIL'}  {part.name:<5} {word[not score.passes]}{how}: "
          f"{score.score:.1%} {part.measure}, {steps} steps (needs >= {part.bar:.0%}; "
          f"{extra}chance {score.chance:.2%})")


def against(tuned: Score, scratch: Score) -> str:
  """One part with SPT against the same part from scratch, in words."""
  passing = {(True, True): "both pass", (False, False): "neither passes",
             (True, False): "only SPT passes", (False, True): "only scratch passes"}
  return (f"SPT against scratch, {scratch.part}: {tuned.score:.1%} against {scratch.score:.1%} "
          f"({100 * (tuned.score - scratch.score):+.1f} points; "
          f"{passing[tuned.passes, scratch.passes]})")


def verdict(scores: Sequence[Score]) -> str:
  """"mixes and learns", "mixes, does not learn", ...: the two parts in words."""
  by = {s.part: s.passes for s in scores}
  words = [("mixes" if by["mix"] else "does not mix"),
           ("learns" if by["learn"] else "does not learn")]
  return f"{words[0]} and {words[1]}" if by["mix"] == by["learn"] else ", ".join(words)


# ---------------------------------------------------------------------------------------------
# The ETA: a few timed train steps of each run before any run starts.

@dataclasses.dataclass(frozen=True)
class Timed:
  """One run's train step as timed before the screen: its compile and its step, in seconds."""
  phase: str
  steps: int
  evaluated: int     # examples evaluated over the run (val and test, or val in a pretraining)
  batch_size: int
  compile_s: float
  step_s: float

  @property
  def seconds(self) -> float:
    return (RUN_START_S + self.compile_s + self.steps * self.step_s
            + EVAL_SHARE * self.evaluated * self.step_s / self.batch_size)


def eta_line(timed: Sequence[Timed]) -> str:
  total = sum(t.seconds for t in timed)
  parts = ", ".join(f"{t.phase} {t.steps} x {1e3 * t.step_s:.0f} ms" for t in timed)
  return (f"ETA {minutes(total)} on this machine now ({PROBE_STEPS} steps of each run timed: "
          f"{parts}; compiling {sum(t.compile_s for t in timed):.0f} s)")


def time_steps(config, data) -> tuple[float, float]:
  """(compile_s, step_s) of this config's train step: the runner's own step on a batch of zeros,
  timed over PROBE_STEPS steps after the one that compiles it."""
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from lra.training import train  # pylint: disable=import-outside-toplevel
  s = train.setup(config, data.spec)
  state = train.init_state(s, data.spec, config.train.seed)
  rows = config.train.batch_size
  batch = train.example_batch(data.spec, rows, noise=s.objective.noise)
  batch["label"] = np.zeros((rows,), np.int32)
  placed = [s.put(batch, rows)]
  began = time.perf_counter()
  state, _ = s.train_step(state, placed)
  jax.block_until_ready(state)
  compile_s = time.perf_counter() - began
  began = time.perf_counter()
  for _ in range(PROBE_STEPS):
    state, _ = s.train_step(state, placed)
  jax.block_until_ready(state)
  return compile_s, (time.perf_counter() - began) / PROBE_STEPS


def probe(mixer: str, *, seed: int, spt: bool, overrides: Sequence[str] = (),
          data_dir: Path | None = None) -> list[Timed]:
  """Each run of the screen timed (making its data first, where missing): from scratch, and
  with `spt` its pretrainings and fine-tunes too (a fine-tune's step is the scratch run's)."""
  from lra.runs.config_loading import default_data_dir, load_data, resolve_config
  timed = []
  for part in PARTS:
    for phase, steps, settings in [*part.phases(False), *(part.phases(True) if spt else [])]:
      if phase == "spt":  # a fine-tune's step is the scratch run's
        scratch = next(t for t in timed if t.phase == f"{part.name} scratch")
        timed.append(dataclasses.replace(scratch, phase=f"{part.name} {phase}", steps=steps))
        continue
      config = resolve_config(part.task, mixer, part.preset,
                              [*settings, f"train.seed={seed}", *overrides])
      data = load_data(config, data_dir or default_data_dir(), log=lambda _: None)
      splits = ("val",) if phase == "pretrain" else ("val", "test")
      most = config.eval.max_examples or math.inf
      evaluated = part.evaluations(steps) * sum(min(data.num_examples(s), most) for s in splits)
      compile_s, step_s = time_steps(config, data)
      timed.append(Timed(f"{part.name} {phase}", steps, int(evaluated),
                         config.train.batch_size, compile_s, step_s))
  return timed


# ---------------------------------------------------------------------------------------------
# Running the parts.

def _cpu_s() -> float:
  used = resource.getrusage(resource.RUSAGE_SELF)
  return used.ru_utime + used.ru_stime


def _train(part: Part, mixer: str, overrides: Sequence[str], run_dir: Path,
           data_dir: Path | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
  """One run to its end: complete, or diverged (a result: the part fails); Ctrl-C stops it."""
  from lra import run as runner  # pylint: disable=import-outside-toplevel
  final = runner.run(part.task, mixer, preset=part.preset, overrides=overrides,
                     data_dir=data_dir, run_dir=run_dir, results_dir=run_dir.parent,
                     progress=False)
  if final.get("status") == "interrupted":
    raise KeyboardInterrupt
  if final.get("status") not in ("complete", "diverged"):
    raise errors.BadValue(f"the screen's {part.name} run of {mixer} ended {final.get('status')}"
                          f" at step {final.get('step')}: {final.get('stop_reason')}")
  logs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
          if line.strip()]
  return final, logs


def run_part(part: Part, mixer: str, *, seed: int, spt: bool, overrides: Sequence[str] = (),
             data_dir: Path | None = None) -> Score:
  """The part for `mixer` in a temporary folder: from scratch, or pretrained then fine-tuned."""
  began, cpu = time.monotonic(), _cpu_s()
  with tempfile.TemporaryDirectory(prefix=f"lra-screen-{part.name}-") as tmp:
    start: list[str] = []
    for phase, _, settings in part.phases(spt):
      run_dir = Path(tmp) / phase
      final, logs = _train(part, mixer, [*settings, f"train.seed={seed}", *overrides, *start],
                           run_dir, data_dir)
      if final["status"] != "complete":
        break  # a pretraining that diverged leaves nothing to fine-tune
      start = [f"spt.init_from={run_dir}"]
  chance = float(final.get("chance_accuracy") or 0.0) if part.name == "mix" else 0.5
  if final["status"] != "complete":
    score = chance
  elif part.name == "mix":
    score = float(final["test_accuracy"])
  else:
    score = fit_screen.read_fit(logs, mixer, part.preset, ()).train_accuracy
  return Score(part.name, score, chance, time.monotonic() - began, _cpu_s() - cpu,
               float(final["steps_per_s"]), final["status"],
               f"{phase} at step {final.get('step')}: {final.get('stop_reason')}"
               if final["status"] != "complete" else "")


def screen(mixer: str, *, seed: int = 0, spt: bool = False, overrides: Sequence[str] = (),
           data_dir: Path | None = None,
           say: Callable[[str], None] = lambda _: None) -> list[Score]:
  """Both parts from scratch (and with SPT), each line said as it ends."""
  scores = []
  for use_spt in (False, True) if spt else (False,):
    for part in PARTS:
      scores.append(run_part(part, mixer, seed=seed, spt=use_spt, overrides=overrides,
                             data_dir=data_dir))
      say(line(scores[-1], use_spt))
  return scores


# ---------------------------------------------------------------------------------------------
# The built-in mixers' records, and where a mixer stands among them.

def load_records(path: Path | None = None) -> list[dict[str, Any]]:
  """The committed records (results/screen/screen.json), [] where there are none (an installed
  copy has no results/)."""
  if path is None:
    from lra.report.results import committed_results_dir
    results = committed_results_dir()
    if results is None:
      return []
    path = results / RECORDS
  return json.loads(path.read_text()) if path.exists() else []


def seeds_of(records: Sequence[dict[str, Any]], part: str, spt: bool
             ) -> dict[str, list[dict[str, Any]]]:
  """{mixer: its part's result on each seed, in seed order}, from scratch or with SPT."""
  found: dict[str, list[dict[str, Any]]] = {}
  for r in sorted(records, key=lambda r: r["seed"]):
    if r["spt"] == spt:
      found.setdefault(r["mixer"], []).append(r[part])
  return found


def mean_scores(records: Sequence[dict[str, Any]], part: str, spt: bool) -> dict[str, float]:
  return {m: sum(r["score"] for r in rs) / len(rs)
          for m, rs in seeds_of(records, part, spt).items()}


def standing(score: float, part: str, records: Sequence[dict[str, Any]], spt: bool = False
             ) -> str:
  """Where `score` falls among the built-in mixers' means over their seeds, and how many of them
  pass on every seed, in words."""
  results = seeds_of(records, part, spt)
  if not results:
    return "no committed screen records to compare with (results/screen/screen.json)"
  ranked = sorted(mean_scores(records, part, spt).items(), key=lambda kv: -kv[1])
  above = [(m, v) for m, v in ranked if v > score]
  below = [(m, v) for m, v in ranked if v <= score]
  near = "; ".join(f"next {side}: {m} {v:.1%}" for side, group in
                   (("above", above[-1:]), ("below", below[:1])) for m, v in group)
  every = sum(all(r["passes"] for r in rs) for rs in results.values())
  some = sum(any(r["passes"] for r in rs) for rs in results.values()) - every
  seeds = max(len(rs) for rs in results.values())
  return (f"{len(above)} of the {len(ranked)} built-in mixers score higher, over their "
          f"{seeds} seeds ({near}); {every} of them pass on every seed"
          + (f", {some} on some" if some else ""))


def time_standing(seconds: float, records: Sequence[dict[str, Any]], spt: bool) -> str:
  walls = {}
  for r in records:
    if r["spt"] == spt:
      walls.setdefault(r["mixer"], []).append(sum(r[p.name]["wall_s"] for p in PARTS))
  if not walls:
    return ""
  spans = sorted(sum(v) / len(v) for v in walls.values())
  return (f"; the built-in mixers' took {minutes(spans[0])} to {minutes(spans[-1])} on one core"
          " beside other runs")


def minutes(seconds: float) -> str:
  return f"{seconds:.0f} s" if seconds < 60 else f"{seconds / 60:.1f} min"


# ---------------------------------------------------------------------------------------------
# The records of the built-in mixers (python -m lra.bench.screen).

def reversals(records: Sequence[dict[str, Any]], spt: bool = False
              ) -> dict[str, tuple[int, int, list[str]]]:
  """{"mix" | "learn" | "verdict": (reversed, compared, the mixers reversed)}: how often a mixer's
  second seed gave the other verdict than its first (seeds in order; the first two compared)."""
  by: dict[str, list[dict[str, Any]]] = {}
  for r in sorted(records, key=lambda r: r["seed"]):
    if r["spt"] == spt:
      by.setdefault(r["mixer"], []).append(r)
  pairs = {m: rs[:2] for m, rs in by.items() if len(rs) >= 2}
  found = {}
  for key in ("mix", "learn", "verdict"):
    flip = lambda r, key=key: (  # noqa: E731
        r[key]["passes"] if key != "verdict" else (r["mix"]["passes"], r["learn"]["passes"]))
    names = sorted(m for m, (a, b) in pairs.items() if flip(a) != flip(b))
    found[key] = (len(names), len(pairs), names)
  return found


def record(mixer: str, seed: int, spt: bool, scores: Sequence[Score], timed: Sequence[Timed]
           ) -> dict[str, Any]:
  """One line of screen.json: each part's score and time, and the runs' timed steps (the ETA)."""
  parts = {s.part: {**dataclasses.asdict(s), "passes": s.passes} for s in scores}
  for value in parts.values():
    del value["part"]
  return {"mixer": mixer, "seed": seed, "spt": spt, **parts,
          "timed": [dataclasses.asdict(t) for t in timed],
          "wall_s": round(sum(s.wall_s for s in scores), 1),
          "cpu_s": round(sum(s.cpu_s for s in scores), 1)}


def eta_s(entry: dict[str, Any]) -> float:
  """A record's ETA at today's RUN_START_S and EVAL_SHARE."""
  return sum(Timed(**t).seconds for t in entry["timed"])


def markdown(records: Sequence[dict[str, Any]]) -> str:
  """results/screen/README.md: every record and the reversal rates, made from screen.json."""
  mixers = sorted({r["mixer"] for r in records})
  seeds = sorted({r["seed"] for r in records})
  get = {(r["mixer"], r["seed"], r["spt"]): r for r in records}

  def cell(mixer, seed, spt, part):
    r = get.get((mixer, seed, spt))
    return "" if r is None else f"{r[part]['score']:.1%}{'' if r[part]['passes'] else ' ✗'}"

  head = ["mixer"] + [f"{p.name}, seed {s}{', SPT' if spt else ''}" for spt in (False, True)
                      for p in PARTS for s in seeds] + ["time, seed 0", "ETA, seed 0"]
  rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for m in mixers:
    r0 = get.get((m, seeds[0], False))
    timing = [minutes(r0["wall_s"]), minutes(eta_s(r0))] if r0 else ["", ""]
    rows.append("| " + " | ".join(
        [m] + [cell(m, s, spt, p.name) for spt in (False, True) for p in PARTS for s in seeds]
        + timing) + " |")
  out = [
      "# The screen of the built-in mixers (`lra check MIXER --screen`)", "",
      "Generated by `python -m lra.bench.screen --out results/screen --seeds 0,1 --spt` from "
      "screen.json; do not edit.", "",
      f"**mix**: {MIX.measure}, {MIX.steps} steps; passes at >= {MIX.bar:.0%} (one end alone "
      f"gives 25%, chance 6.25%). **learn**: {LEARN.measure}, {LEARN.steps} steps; passes at >= "
      f"{LEARN.bar:.0%} (chance 50%). SPT: {_spt_words()}. ✗ = fails the part's bar. Time: both "
      "parts from scratch, data and compiling included, one core beside other runs; the ETA is "
      "what `lra check --screen` printed before starting them.", ""]
  out += rows + [""]
  for spt in (False, True):
    rev = reversals(records, spt)
    if rev["verdict"][1]:
      out.append(_reversal_words(rev, spt))
  if any(r["spt"] for r in records):
    out.append(_spt_words_measured(records))
  return "\n".join(out) + "\n"


def _spt_words() -> str:
  return ", ".join(f"{p.name} " + " + ".join(str(steps) for _, steps, _ in p.phases(True))
                   + " steps" for p in PARTS) + " (pretraining + fine-tuning)"


def _reversal_words(rev: dict[str, tuple[int, int, list[str]]], spt: bool) -> str:
  flipped, pairs, names = rev["verdict"]
  return (f"**{'With SPT' if spt else 'From scratch'}, seed 1 against seed 0:** the verdict "
          f"reversed for {flipped} of {pairs} mixers" + (f" ({', '.join(names)})" if names else "")
          + f"; mix for {rev['mix'][0]}, learn for {rev['learn'][0]}.")


def _spt_words_measured(records: Sequence[dict[str, Any]]) -> str:
  lines = []
  for part in PARTS:
    scratch, spt = mean_scores(records, part.name, False), mean_scores(records, part.name, True)
    both = sorted(set(scratch) & set(spt))
    if not both:
      continue
    diff = {m: spt[m] - scratch[m] for m in both}
    higher = sum(d > 0.01 for d in diff.values())
    lower = sum(d < -0.01 for d in diff.values())
    passes = [sum(all(r["passes"] for r in seeds_of(records, part.name, s)[m]) for m in both)
              for s in (False, True)]
    lines.append(f"{part.name}: SPT higher for {higher}, lower for {lower} of {len(both)} "
                 f"(mean {100 * sum(diff.values()) / len(both):+.1f} points); {passes[1]} pass "
                 f"on every seed with SPT, {passes[0]} from scratch")
  return ("**SPT against from scratch** (means over the seeds, a point or less counted as "
          "equal): " + "; ".join(lines) + ".")


def main(argv: list[str] | None = None) -> int:
  from lra.models.mixers import MIXERS
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--mixers", default="all", help="comma-separated, or all (the registry)")
  parser.add_argument("--seeds", default="0,1")
  parser.add_argument("--spt", action="store_true", help="also with self-pretraining")
  parser.add_argument("--out", type=Path, default=Path("results/screen"))
  args = parser.parse_args(argv)
  mixers = sorted(MIXERS) if args.mixers == "all" else args.mixers.split(",")
  args.out.mkdir(parents=True, exist_ok=True)
  path = args.out / Path(RECORDS).name
  done = load_records(path)
  for spt in (False, True) if args.spt else (False,):
    for seed in (int(s) for s in args.seeds.split(",")):
      for mixer in mixers:
        if any((r["mixer"], r["seed"], r["spt"]) == (mixer, seed, spt) for r in done):
          continue
        timed = [t for t in probe(mixer, seed=seed, spt=spt)
                 if t.phase.endswith("scratch") != spt]
        scores = [run_part(p, mixer, seed=seed, spt=spt) for p in PARTS]
        done.append(record(mixer, seed, spt, scores, timed))
        print(f"{mixer:16} seed {seed}{' SPT' if spt else ''}: {verdict(scores)} "
              f"({', '.join(f'{s.part} {s.score:.1%}' for s in scores)}; "
              f"{minutes(done[-1]['wall_s'])}, ETA {minutes(eta_s(done[-1]))})", flush=True)
        path.write_text(json.dumps(done, indent=1) + "\n")
        (args.out / "README.md").write_text(markdown(done))
  return 0


if __name__ == "__main__":
  sys.exit(main())
