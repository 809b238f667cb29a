"""The fitting screen: can a mixer fit 480 Pathfinder images (4x4 squares) in 600 steps?

Minutes before hours: a block that cannot fit 480 images seen 40 times will not learn 160,000 in a
table run (S5 under the common block's LayerNorm stayed at ln 2 here for 600 steps and at chance
for 18,000 steps of the full set; docs/mixers.md). `lra check MIXER --fit` runs it for one mixer;
`python -m lra.bench.fit_screen` for many, writing results/fit_screen/ (the table's pre-flight).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

# The `squares` preset's model and optimizer on its data's first 600 images (480 to train on),
# seen 40 times; a short warm-up, no evaluation until the end.
OVERRIDES = ("data.generator.num_images=600", "train.num_steps=600", "train.warmup_steps=60",
             "eval.every_steps=600", "checkpoint.every_steps=600", "train.log_every_steps=50")
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
            f"{self.train_loss:.3f}) over the last {LAST_STEPS} of 600 steps on 480 Pathfinder "
            f"images as 4x4 squares (needs >= {BAR:.0%}; ln 2 = {0.6931:.3f} is no fit)")


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
  last = [r for r in logs if "train/accuracy" in r][-(LAST_STEPS // 50):]
  mean = lambda key: sum(r[key] for r in last) / len(last)  # noqa: E731
  return Fit(mixer, preset, tuple(overrides), mean("train/accuracy"), mean("train/loss"),
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
