"""Path-X: Pathfinder at 128x128 (16,384 tokens), read by the Pathfinder loader."""
from __future__ import annotations

import functools
from pathlib import Path

from lra.tasks.generators.pathfinder import generate as pathfinder_generator
from lra.tasks.sources import pixels
from lra.tasks.sources.pathfinder import command, generated_length, prepare_resolution
from lra.tasks.sources.release import RELEASE_URL
from lra.tasks.contract.spec import Task

SIDE = 128


def prepare(source: Path, out_dir: Path, *, difficulty: str = "hard", split_seed: int = 0,
            workers: int | None = None) -> dict:
  """Path-X from pathfinder128/; see `tasks.pathfinder.prepare_resolution` for the arguments."""
  return prepare_resolution(SIDE, "pathx", source, out_dir, difficulty=difficulty,
                            split_seed=split_seed, workers=workers)


TASK = Task(
    name="pathx",
    description="Path-X 128x128 (16,384 tokens): Pathfinder at scale",
    data_hint=(f"Bring the LRA release (nothing is downloaded; the official archive: "
               f"{RELEASE_URL}) or generate it: "
               "lra data generate pathfinder --out DIR --resolution 128; then run: "
               f"{command('pathx')}"),
    prepare=prepare,
    decode=pixels.decode,
    generate_small=functools.partial(pathfinder_generator.generate_small, resolution=128),
    generated_length=functools.partial(generated_length, resolution=128),
)
