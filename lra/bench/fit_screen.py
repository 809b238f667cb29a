"""The fitting screen: can a mixer fit a few hundred Pathfinder images (4x4 squares) in minutes?

Minutes before hours: a block that cannot fit TRAIN_IMAGES images seen about 40 times will not
learn 160,000 in a table run (S5 under the common block's LayerNorm stayed at ln 2 here for the
whole screen and at chance for 18,000 steps of the full set; docs/mixers.md). `lra check MIXER
--fit` runs it for one mixer; `python -m lra.bench.fit_screen` for many, writing
results/fit_screen/ (the table's pre-flight).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

# The `squares` preset's model and optimizer on its data's first IMAGES images (80% of them to
# train on), each seen about 40 times in STEPS steps; a short warm-up, one evaluation at the end.
IMAGES, STEPS, LOG_EVERY = 600, 600, 50
TRAIN_IMAGES = IMAGES * 8 // 10  # the generator's 80/10/10 split
OVERRIDES = (f"data.generator.num_images={IMAGES}", f"train.num_steps={STEPS}",
             f"train.warmup_steps={STEPS // 10}", f"eval.every_steps={STEPS}",
             f"checkpoint.every_steps={STEPS}", f"train.log_every_steps={LOG_EVERY}")
# Train accuracy over the last 100 steps that counts as fitting. Measured with this screen
# (results/fit_screen/): every mixer that learns the squares table's task fits past it; S5 under
# the common block's LayerNorm, which stays at chance on the full set, does not.
BAR = 0.65
LAST_STEPS = 100


@dataclasses.dataclass(frozen=True)
class Fit:
  mixer: str
  preset: str
  overrides: tuple[str, ...]
  train_accuracy: float   # mean over the last LAST_STEPS steps' log windows
  train_loss: float
  steps_per_s: float

  @property
  def fits(self) -> bool:
    return self.train_accuracy >= BAR

  def line(self) -> str:
    verdict = "PASS" if self.fits else "FAIL"
    return (f"{verdict}  fits                train accuracy {self.train_accuracy:.1%} (loss "
            f"{self.train_loss:.3f}) over the last {LAST_STEPS} of {STEPS} steps on "
            f"{TRAIN_IMAGES} Pathfinder images as 4x4 squares (needs >= {BAR:.0%}; ln 2 = "
            f"{0.6931:.3f} is no fit)")


def screen(mixer: str, *, preset: str = "squares", overrides: tuple[str, ...] = (),
           data_dir: Path | None = None) -> Fit:
  """Trains `mixer` on the screen in a temporary run folder and reads its last log windows."""
  from lra import run as runner
  with tempfile.TemporaryDirectory(prefix="lra-fit-") as tmp:
    run_dir = Path(tmp) / "run"
    runner.run("pathfinder", mixer, preset=preset, overrides=(*OVERRIDES, *overrides),
               data_dir=data_dir, run_dir=run_dir, results_dir=Path(tmp), progress=False)
    logs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            if line.strip()]
  return read_fit(logs, mixer, preset, tuple(overrides))


def read_fit(logs: list[dict], mixer: str, preset: str, overrides: tuple[str, ...]) -> Fit:
  """The screen's verdict from a run's metrics lines: the mean of the log windows of its last
  LAST_STEPS steps (train accuracy, loss and speed)."""
  last = [r for r in logs if "train/accuracy" in r][-(LAST_STEPS // LOG_EVERY):]
  mean = lambda key: sum(r[key] for r in last) / len(last)  # noqa: E731
  return Fit(mixer, preset, overrides, mean("train/accuracy"), mean("train/loss"),
             mean("train/steps_per_s"))


def main(argv: list[str] | None = None) -> int:
  from lra.models.mixers import MIXERS
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--mixers", default="all", help="comma-separated, or all (the registry)")
  parser.add_argument("--preset", default="squares")
  parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                      help="an override for every mixer (repeatable)")
  parser.add_argument("--out", type=Path, default=Path("results/fit_screen"))
  args = parser.parse_args(argv)
  mixers = sorted(MIXERS) if args.mixers == "all" else args.mixers.split(",")
  args.out.mkdir(parents=True, exist_ok=True)
  record = args.out / "fit.json"
  done = json.loads(record.read_text()) if record.exists() else []
  for mixer in mixers:
    fit = screen(mixer, preset=args.preset, overrides=tuple(args.config))
    print(f"{mixer:16} {fit.line()}", flush=True)
    done = [r for r in done if (r["mixer"], r["preset"], r["overrides"]) != (
        mixer, args.preset, list(args.config))] + [dataclasses.asdict(fit) | {"fits": fit.fits}]
    record.write_text(json.dumps(done, indent=1) + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
