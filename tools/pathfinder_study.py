"""The study behind Pathfinder's `laptop` preset: which settings let a sequence model leave chance.

Every study run is an ordinary `lra run pathfinder MIXER --preset laptop` with a few overrides, in
results/pathfinder_study/<name>/ (config.json says everything it ran with). This file is the list
of those runs, in the order they were made, with the question each one asks; `summary` turns
their folders into the table of results/pathfinder_study/README.md (the study's report) and one
curves PNG per difficulty (and one for the fitting screens, FIT below).

  python tools/pathfinder_study.py list                  # the runs and their commands
  python tools/pathfinder_study.py run NAME [--core C] [--stop-after S]   # one run, or resume it
  python tools/pathfinder_study.py summary               # README.md's table and curves_*.png

`--core C` pins a run to one core (taskset) with one XLA intra-op thread (PJRT_NPROC=1, the
size of XLA's CPU thread pool; Eigen single-threaded by XLA_FLAGS): on a 2-core CPU two such
runs side by side train ~1.7x more steps per hour than one run on both cores (small ops
parallelise poorly), so their steps/s are a single core's, not the preset's (docs/presets_cpu.md
has the 2-core costs). `--stop-after S` is `lra run`'s: the run stops sealed within S seconds
(a session's end), and the same command resumes it. A run that spans sessions travels as its
archive, committed beside its files (`lra pack results/pathfinder_study/NAME
results/pathfinder_study/NAME/run.pack`, or its parts run.pack.1, .2, ... past 16 MiB); on a
machine without its checkpoints, `run NAME` unpacks it first.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from lra.report.table_rules import decimals
from lra.runs import pack, run_lock

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "results" / "pathfinder_study"
# Study runs evaluate every 500 steps on the first 2,000 images of val and test (SE ~1.1 points
# at 50%): a curve that leaves chance shows within a few hundred steps of doing so. They warm up
# over 1,000 steps (the study's first draft of the preset, pinned so its commands stay exact).
EVAL = ("eval.every_steps=500", "eval.max_examples=2000", "checkpoint.every_steps=500",
        "train.warmup_steps=1000")
CHANCE_LEFT = 0.55  # val accuracy this far above 50% on 2,000 images is 7 standard errors out
# A fitting screen: 600 easy images (480 to train on) seen 40 times in 600 steps. Its question is
# not generalisation but how fast a block can fit images at all; a block that cannot fit 480 in
# minutes will not leave chance on 160,000 in hours, so the screen ranks settings cheaply.
FIT = ("data.generator.num_images=600", "train.num_steps=600", "train.warmup_steps=60",
       "eval.every_steps=200", "checkpoint.every_steps=600")
# The long runs on p x p squares (model.patch, dense pixels only): evaluated every 1,000 steps.
SQUARES = ("eval.every_steps=1000", "checkpoint.every_steps=1000", "model.embedding=dense")
# Every S5 run of the study trained the bare SSM, as S5 in the common block did until its output
# layer became the preset's (lra.runs.run_identity.ADDED_KEYS): their commands say so.
BARE_S5 = "mixers.s5.activation=none"


@dataclasses.dataclass(frozen=True)
class StudyRun:
  name: str
  mixer: str
  question: str
  overrides: tuple[str, ...] = ()
  difficulty: str = "hard"

  @property
  def fit(self) -> bool:
    return all(change in self.overrides for change in FIT)

  @property
  def patch(self) -> int:
    """Pixels per side of each token's square (model.patch): 1 is LRA's one pixel per token."""
    return next((int(change.split("=")[1]) for change in self.overrides
                 if change.startswith("model.patch=")), 1)

  def command(self) -> list[str]:
    # An override of an EVAL key replaces it in place: each key appears once in the command.
    changes = dict(change.split("=", 1) for change in (*EVAL, *self.overrides))
    if self.difficulty != "hard":
      changes["data.generator.difficulty"] = self.difficulty
    return ["lra", "run", "pathfinder", self.mixer, "--preset", "laptop", "--run-dir",
            str((OUT / self.name).relative_to(ROOT)), "--quiet",
            *(f"--config.{key}={value}" for key, value in changes.items())]


STUDY = (
    StudyRun("hard_s5_dense", "s5", "Does the mixer most at home on Pathfinder (an SSM, pixels "
             "read as numbers as S5 reads them) leave chance on the hard set within ~1 epoch?",
             ("model.embedding=dense", "mixers.s5.state_size=16", "train.num_steps=6000", BARE_S5)),
    StudyRun("easy_latte_dense", "latte", "Does Latte leave chance on the easy set (contour "
             "length 6), where the CNN probe passed 85% by 256,000 images?",
             ("model.embedding=dense", "train.num_steps=6000"), difficulty="easy"),
    # Both stayed at ln 2 throughout. Next, the learning rates the authors of both mixers train
    # Pathfinder with (S5: 4.5e-3 with the SSM at 9e-4; the Latte code: 4e-3), on the easy set.
    StudyRun("easy_s5_dense_lr4e-3", "s5", "Does S5 leave chance on the easy set at its "
             "authors' Pathfinder learning rates, with a larger state (P=32)?",
             ("model.embedding=dense", "mixers.s5.state_size=32", "mixers.s5.blocks=4",
              "train.learning_rate=0.004", "train.ssm_learning_rate=0.001",
              "train.num_steps=6000", BARE_S5), difficulty="easy"),
    StudyRun("easy_latte_dense_lr4e-3", "latte", "Does Latte leave chance on the easy set at "
             "the Latte code's Pathfinder learning rate (4e-3)? (Stopped at step 950: its "
             "gradient norm fell to 3e-3 at steps 600 and 850, a collapse to one output.)",
             ("model.embedding=dense", "train.learning_rate=0.004", "train.num_steps=6000"),
             difficulty="easy"),
    # A dense embedding puts every pixel on one line of the embedding space (markers differ
    # from strokes only in length); tokens give the markers' 255 a vector of its own, as the
    # Latte paper and LRA embed pixels.
    StudyRun("easy_latte_token", "latte", "Does Latte leave chance on the easy set with pixel "
             "tokens (the preset's embedding, the Latte paper's and LRA's)? (Stopped at step "
             "1,182, its last evaluation at chance, for the run below.)",
             ("train.num_steps=6000",), difficulty="easy"),
    # long-range-arena#60: LRA's Transformer stayed at 50% on Pathfinder-32 with LRA's fixed
    # positions and reached ~70% with learned ones. Learned positions can place the pixels of one
    # 2-D neighbourhood close together, which a 1-D sinusoid over row-major order cannot.
    StudyRun("easy_latte_learned", "latte", "Do learned positions (LRA's Transformer left chance "
             "on Pathfinder-32 only with them) let Latte leave chance on the easy set? (Two parts: "
             "stopped at step 3,950 by a session's end, resumed from its step-3,500 checkpoint.)",
             ("model.pos_encoding=learned", "train.num_steps=6000"), difficulty="easy"),
    # Nothing left chance within 1.2 epochs, nor did the CNN probe on the hard set (it needed 2-4
    # epochs). So: the fastest block that trains stably at its authors' rates, for 6 epochs,
    # evaluated every 1,000 steps (the eval time goes to training), in parts across sessions.
    StudyRun("easy_s5_long", "s5", "Does S5 (the easy_s5_dense_lr4e-3 block) leave chance on "
             "the easy set within 6 epochs (30,000 steps), where the CNN probe needed 2-4 on the "
             "hard one? (Stopped at step 20,247, 4 epochs, every evaluation a constant answer, "
             "for easy_latte_lr1e-2_long.)",
             ("model.embedding=dense", "mixers.s5.state_size=32", "mixers.s5.blocks=4",
              "train.learning_rate=0.004", "train.ssm_learning_rate=0.001",
              "train.num_steps=30000", "eval.every_steps=1000", "checkpoint.every_steps=1000",
              BARE_S5), difficulty="easy"),
    StudyRun("easy_latte_long", "latte", "Does Latte (the easy_latte_dense block, lr 1e-3) leave "
             "chance on the easy set within 6 epochs (30,000 steps)? (Stopped at step 8,645, at "
             "chance, for easy_latte_lr4e-3_long: the fitting screens below favour 4e-3. "
             "Resumed once the runs on squares showed 1e-3 to be the rate that learns.)",
             ("model.embedding=dense", "train.num_steps=30000", "eval.every_steps=1000",
              "checkpoint.every_steps=1000"), difficulty="easy"),
    # Every evaluation of both long runs was a constant answer, train loss ln 2. Fitting screens
    # (FIT above) ask which block can fit images at all, minutes each, beside the long runs.
    StudyRun("fit_latte", "latte", "How far does the easy_latte_dense block fit 480 easy images "
             "in 40 epochs (600 steps)?", (*FIT, "model.embedding=dense"), difficulty="easy"),
    StudyRun("fit_s5", "s5", "How far does the easy_s5_long block fit the same 480 images?",
             (*FIT, "model.embedding=dense", "mixers.s5.state_size=32", "mixers.s5.blocks=4",
              "train.learning_rate=0.004", "train.ssm_learning_rate=0.001", BARE_S5),
             difficulty="easy"),
    # Mean pooling averages 1,024 tokens, mostly background; a learned class token, mixed with
    # the sequence by every layer, is read out alone.
    StudyRun("fit_latte_cls", "latte", "Does a learned class token instead of mean pooling let "
             "Latte fit them faster?", (*FIT, "model.embedding=dense", "model.pooling=cls"),
             difficulty="easy"),
    StudyRun("fit_latte_token", "latte", "Do pixel tokens (the preset's embedding) instead of "
             "dense pixels let Latte fit them faster?", FIT, difficulty="easy"),
    StudyRun("fit_latte_deep", "latte", "Do 4 layers instead of 2 let Latte fit them faster?",
             (*FIT, "model.embedding=dense", "model.num_layers=4"), difficulty="easy"),
    StudyRun("fit_latte_lr4e-3", "latte", "Does the Latte code's learning rate (4e-3) let Latte "
             "fit them faster?", (*FIT, "model.embedding=dense", "train.learning_rate=0.004"),
             difficulty="easy"),
    StudyRun("fit_s5_lr1e-3", "s5", "Does S5 fit them at the preset's learning rate (1e-3 for "
             "all, the SSM's too) where at 4e-3 it did not?",
             (*FIT, "model.embedding=dense", "mixers.s5.state_size=32", "mixers.s5.blocks=4",
              BARE_S5), difficulty="easy"),
    StudyRun("fit_latte_lr1e-2", "latte", "Does a higher learning rate still (1e-2) let Latte "
             "fit them faster than 4e-3 did?",
             (*FIT, "model.embedding=dense", "train.learning_rate=0.01"), difficulty="easy"),
    # Of the screens, Latte at 4e-3 fitted furthest, its gradient norm dipping to 0.09 at step
    # 300 and recovering: the dip that stopped easy_latte_dense_lr4e-3 at step 950 need not have
    # been a collapse. So the long run on the easy set at 4e-3.
    StudyRun("easy_latte_lr4e-3_long", "latte", "Does Latte at 4e-3 (the block that fitted "
             "furthest) leave chance on the easy set within 6 epochs (30,000 steps)? (Stopped at "
             "step 4,281, every evaluation a constant answer, for easy_latte_20k_lr1e-2.)",
             ("model.embedding=dense", "train.learning_rate=0.004", "train.num_steps=30000",
              "eval.every_steps=1000", "checkpoint.every_steps=1000"), difficulty="easy"),
    # Its first 3,232 steps stayed at chance; the screens ranked 1e-2 above 4e-3 (loss 0.610 and
    # 0.631 at step 600). S5's long run gave its core to this one at step 20,247: its block fitted
    # none of the 480 screen images, at either rate, and all 20 of its evaluations were a constant
    # answer.
    StudyRun("easy_latte_lr1e-2_long", "latte", "Does Latte at 1e-2 (the best screen) leave "
             "chance on the easy set within 6 epochs (30,000 steps)? (Stopped at step 12,693, "
             "every evaluation a constant answer: at 1e-2 even 64 tokens never left chance.)",
             ("model.embedding=dense", "train.learning_rate=0.01", "train.num_steps=30000",
              "eval.every_steps=1000", "checkpoint.every_steps=1000"), difficulty="easy"),
    # Between the screens (480 images, 40 epochs: fitting) and the long runs (160,000 images,
    # 6 epochs at most): does the block generalise at all when it sees a smaller set many times,
    # as LRA's models saw theirs (200 epochs)? Its curve is the held-out val set (2,000 images).
    # It took easy_latte_lr4e-3_long's core at step 4,281 (0.9 epoch), whose gradient norm had
    # fallen to 0.003 twice with the loss at ln 2.
    StudyRun("easy_latte_20k_lr1e-2", "latte", "Does Latte at 1e-2 leave chance on held-out "
             "images after seeing 16,000 easy images 12 times (6,000 steps)?",
             ("data.generator.num_images=20000", "train.num_steps=6000",
              "train.warmup_steps=300", "model.embedding=dense", "train.learning_rate=0.01"),
             difficulty="easy"),
    # Every setting so far stays at ln 2 at 1,024 tokens. The next runs shorten the sequence
    # instead: model.patch=p makes each p x p pixel square one token (1,024/p^2 tokens), a
    # diagnostic and not LRA's protocol, to find the length at which a mixer begins to learn.
    StudyRun("fit_latte_patch4", "latte", "Do 4x4 pixel squares as tokens (64 tokens) let the "
             "fit_latte_lr1e-2 block fit the 480 images faster?",
             (*FIT, "model.embedding=dense", "model.patch=4", "train.learning_rate=0.01"),
             difficulty="easy"),
    StudyRun("fit_latte_patch2", "latte", "Do 2x2 pixel squares as tokens (256 tokens) let it "
             "fit them faster?",
             (*FIT, "model.embedding=dense", "model.patch=2", "train.learning_rate=0.01"),
             difficulty="easy"),
    # 4x4 squares fitted 82% of the images (1x1: 68%, 2x2: 64%) at 47 steps/s on one core.
    StudyRun("easy_latte_patch4", "latte", "Does Latte on 4x4 squares (64 tokens) leave chance "
             "on the easy set within 6 epochs (30,000 steps)?",
             (*SQUARES, "model.patch=4", "train.learning_rate=0.01", "train.num_steps=30000"),
             difficulty="easy"),
    StudyRun("easy_latte_patch4_lr1e-3", "latte", "Does the preset's learning rate (1e-3), less "
             "noisy at batch 32 than 1e-2, let it leave chance?",
             (*SQUARES, "model.patch=4", "train.num_steps=30000"),
             difficulty="easy"),
    StudyRun("easy_latte_patch4_deep", "latte", "Do 4 layers (more steps along a path) let it "
             "leave chance?",
             (*SQUARES, "model.patch=4", "model.num_layers=4", "train.num_steps=30000"),
             difficulty="easy"),
    StudyRun("easy_softmax_patch4", "softmax", "Does softmax attention with learned positions "
             "(LRA's Transformer on Pathfinder) leave chance on 4x4 squares?",
             (*SQUARES, "model.patch=4", "model.pos_encoding=learned", "train.num_steps=30000"),
             difficulty="easy"),
    # At 1e-3, Latte on 4x4 squares left chance on the easy set (val 60.7% at step 8,000): the
    # hard set, a longer sequence (2x2 squares) and S5 follow.
    StudyRun("hard_latte_patch4", "latte", "Does Latte on 4x4 squares at 1e-3 leave chance on the "
             "hard set (the preset's data) within 6 epochs?",
             (*SQUARES, "model.patch=4", "train.num_steps=30000")),
    StudyRun("easy_latte_patch2", "latte", "Does it leave chance on the easy set at 256 tokens "
             "(2x2 squares)? (Stopped at step 12,000, val 79.2%, its core given to "
             "easy_latte_long at 1e-3.)",
             (*SQUARES, "model.patch=2", "train.num_steps=30000"),
             difficulty="easy"),
    StudyRun("easy_s5_patch4", "s5", "Does S5 (the preset's block) leave chance on the easy set "
             "on 4x4 squares?",
             (*SQUARES, "model.patch=4", "train.num_steps=30000", BARE_S5),
             difficulty="easy"),
    # On the easy set 2x2 squares left chance sooner than 4x4 ones (63.6% at step 4,000, 76.5% at
    # 9,000).
    StudyRun("hard_latte_patch2", "latte", "Does Latte on 2x2 squares (256 tokens) leave chance on "
             "the hard set within 6 epochs?",
             (*SQUARES, "model.patch=2", "train.num_steps=30000")),
)


def run(study: StudyRun, core: int | None, stop_after: float | None = None) -> int:
  return run_pinned(OUT / study.name, study.command(), core, stop_after)


def run_pinned(folder: Path, command: list[str], core: int | None,
               stop_after: float | None = None) -> int:
  """Runs `command` (an `lra run` whose run folder is `folder`), unpacked from its archive first
  when its checkpoints are not here, pinned to `core` with one XLA thread, stopped within
  `stop_after` seconds."""
  archive = folder / "run.pack"  # or its parts run.pack.1, .2, ... when it was split
  if pack.parts_of(archive, existing_only=True) and not any((folder / "checkpoints").glob("*")):
    # A run carried from another machine (a fresh clone): its checkpoints come from its archive.
    _, manifest = pack.unpack(archive, None, run_dir=folder)
    print(f"unpacked {archive.relative_to(ROOT)}: checkpoint {manifest['checkpoint_step']} of "
          f"{manifest['num_steps']}", flush=True)
  env = dict(os.environ)
  command = list(command)
  if stop_after is not None:
    command += ["--stop-after", f"{stop_after:g}"]
  if core is not None:
    # XLA_FLAGS has no intra-op thread flag (a word without `--` there is skipped in silence,
    # an unknown flag aborts): XLA's CPU client sizes its intra-op pool from PJRT_NPROC, else from
    # the cores the process may use, which taskset narrows too. Eigen's calls single-threaded.
    flags = env.get("XLA_FLAGS", "").split()
    if "--xla_cpu_multi_thread_eigen=false" not in flags:
      flags.append("--xla_cpu_multi_thread_eigen=false")
    env["XLA_FLAGS"], env["PJRT_NPROC"] = " ".join(flags), "1"
    command = ["taskset", "-c", str(core), *command]
  print(shlex.join(command), flush=True)
  return subprocess.call(command, cwd=ROOT, env=env)


def _curve(run_dir: Path) -> list[dict]:
  path = run_dir / "metrics.jsonl"
  return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if (
      path.exists()) else []


def _row(study: StudyRun) -> dict | None:
  run_dir = OUT / study.name
  if not (run_dir / "final.json").exists():
    return None
  final = json.loads((run_dir / "final.json").read_text())
  curve = _curve(run_dir)
  # final.json's step is where the run stopped (the curve's last log point may be before it);
  # a running run's final.json may be older than its curve.
  step = max([final.get("step") or 0, *(r["step"] for r in curve)])
  evals = [r for r in curve if "val/accuracy" in r]
  left = next((r["step"] for r in evals if r["val/accuracy"] >= CHANCE_LEFT), None)
  train = [r for r in curve if "train/loss" in r]
  return {"run": study.name, "difficulty": study.difficulty, "mixer": study.mixer,
          "tokens": 1024 // study.patch ** 2,
          "changes": ", ".join(study.overrides), "status": status_of(final, run_dir),
          "steps": f"{step:,} of {final['num_steps']:,}",
          "best val": _pct(max((r["val/accuracy"] for r in evals), default=None)),
          "test at best val": _pct(final.get("test_accuracy")),
          f"first val >= {CHANCE_LEFT:.0%}": "never" if left is None else f"step {left:,}",
          "last train loss": f"{train[-1]['train/loss']:.4f}" if train else "",
          "last train accuracy": _pct(train[-1].get("train/accuracy")) if train else "",
          "steps/s (1 core)": f"{final['steps_per_s']:.2f}" if final.get("steps_per_s") else "",
          "wall": f"{final['wall_time_s'] / 60:.0f} min"}


def status_of(final: dict, run_dir: Path) -> str:
  """final.json's status, except that a run whose process was killed (a session's end) without
  updating it is `stopped`, not `running`; the same command resumes it."""
  if final["status"] == "running" and not run_lock.RunDirLock(run_dir, take=False).held():
    return "stopped"
  return final["status"]


def _pct(x: float | None) -> str:
  return "" if x is None else decimals(100 * x)


def table() -> list[str]:
  """README.md's table of the committed runs, from their folders (tests compare it)."""
  rows = [row for row in map(_row, STUDY) if row]
  if not rows:
    return []
  keys = list(rows[0])
  return ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys),
          *("| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows)]


# README.md is the study's report (the questions, commands and conclusions, written by hand);
# `summary` rewrites only its table and figures, between these markers.
MARKERS = ("<!-- pathfinder-study:start -->", "<!-- pathfinder-study:end -->")


def summary_block(figures: list[str]) -> str:
  """README.md's generated block: the runs' table and their curves."""
  return "\n".join([
      MARKERS[0], "<!-- Generated by `python tools/pathfinder_study.py summary` from the run "
      "folders here; do not edit between these markers. -->", "",
      "Accuracies in % on the first 2,000 images of val and test.", "", *table(), "",
      *(f"![{name[7:-4]}]({name})" for name in figures), MARKERS[1]])


def generated_lines(text: str) -> list[str]:
  """The lines of README.md's generated block (the report around it is not generated)."""
  start, end = text.index(MARKERS[0]), text.index(MARKERS[1])
  return text[start:end].splitlines()


def summary() -> None:
  from lra.report.tables import splice_readme  # pylint: disable=import-outside-toplevel
  figures = _plot([s for s in STUDY if (OUT / s.name / "metrics.jsonl").exists()])
  readme = OUT / "README.md"
  readme.write_text(splice_readme(readme.read_text(), summary_block(figures), readme, MARKERS,
                                  "python tools/pathfinder_study.py summary"))
  print(f"wrote {readme}'s table and {', '.join(figures)}")


def _plot(studies: list[StudyRun]) -> list[str]:
  """curves_<difficulty>.png per difficulty (one pixel per token), curves_squares.png for the
  runs on p x p squares and curves_fit.png for the fitting screens (lra plot's figure); returns
  their file names."""
  from lra.report.plot import curves_figure
  names = []
  long_runs = [s for s in studies if not s.fit]
  groups = {d: [s for s in long_runs if s.difficulty == d and s.patch == 1]
            for d in ("hard", "intermediate", "easy")}
  groups["squares"] = [s for s in long_runs if s.patch > 1]
  groups["fit"] = [s for s in studies if s.fit]
  for group, members in groups.items():
    if members:
      names.append(f"curves_{group}.png")
      curves_figure([OUT / s.name for s in members]).savefig(OUT / names[-1])
  return names


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  sub = parser.add_subparsers(dest="command", required=True)
  sub.add_parser("list")
  one = sub.add_parser("run")
  one.add_argument("name", choices=[s.name for s in STUDY])
  one.add_argument("--core", type=int, help="pin to this core, one XLA thread")
  one.add_argument("--stop-after", type=float, metavar="SECONDS",
                   help="stop sealed within SECONDS (lra run's option); the same command resumes")
  sub.add_parser("summary")
  args = parser.parse_args(argv)
  if args.command == "list":
    for study in STUDY:
      print(f"{study.name}: {study.question}\n  {shlex.join(study.command())}")
    return 0
  if args.command == "run":
    return run(next(s for s in STUDY if s.name == args.name), args.core, args.stop_after)
  summary()
  return 0


if __name__ == "__main__":
  sys.exit(main())
