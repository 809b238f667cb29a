"""The bare `lra`: the demo (bidirectional Latte on generated ListOps). Its options are the top
level's own, under their own names: an option written before a command is refused, never passed on
to the command (a silently replaced default once left a generator unseeded)."""
from __future__ import annotations

import argparse
import sys

from lra import errors
from lra.cli import run as run_command
from lra.report import timings
from lra.runs import command

DEMO = ("listops", "latte", "demo")
DEMO_PRESETS = ("demo", "smoke")  # what the bare `lra` takes; its help says so
HELP = ("With no command, `lra` runs the demo: bidirectional Latte (4 layers, D=64) trains "
        "4,000 steps on generated ListOps (depth <= 4, 8-80 tokens: easier than LRA's) and "
        f"prints its test accuracy beside the majority class's: {timings.text('demo')}, its "
        "data made and its programs compiled included (the progress line gives its own ETA). "
        "Its run folder is "
        "results/local/runs/listops/latte/demo_seed0 (git-ignored); "
        "run `lra` again to see the result, delete the folder to train again. The options "
        "below apply to the demo; each command has its own --help.")
_PREFIX = "demo_"  # the top level's dests: apart from every command's


def add_options(parser: argparse.ArgumentParser) -> None:
  group = parser.add_argument_group("the demo's options (with no command)")
  command.add_run_options(
      group, preset_default=None, dest_prefix=_PREFIX,
      preset_help=("demo (the default here) or smoke (seconds); other presets: "
                   "`lra run TASK MIXER --preset P` (`lra list`)"),
      run_dir_help="default results/local/runs/listops/latte/demo_seed0")


def given(args: argparse.Namespace) -> list[str]:
  """The demo's options on this command line (each is None or False when not given)."""
  return [name for name, value in vars(args).items()
          if name.startswith(_PREFIX) and value not in (None, False)]


def refuse_before(args: argparse.Namespace) -> None:
  """A command after the demo's options: they would apply to nothing; say where they go."""
  names = [f"--{name[len(_PREFIX):].replace('_', '-')}" for name in given(args)]
  if names:
    raise errors.BadValue(f"{', '.join(names)} before `{args.command}` is an option of the bare "
                          f"`lra` (the demo): write it after the command, as in `lra "
                          f"{args.command} ... {names[0]} VALUE` (`lra {args.command} --help`).")


def choice(preset: str | None) -> tuple[str, str, str]:
  """The demo's task, mixer and preset: demo, or smoke when named; any other preset is refused
  with the `lra run` command that takes it (the bare command runs only the demo)."""
  task, mixer, _ = DEMO
  if preset is None:
    return DEMO
  if preset in DEMO_PRESETS:
    return task, mixer, preset
  from lra.configs.common import (CPU_PRESETS, OWN_ARCHITECTURE_PRESETS, PRESETS,
                                  PUBLISHED_PRESETS)
  if preset not in PRESETS + CPU_PRESETS + PUBLISHED_PRESETS:
    fix = "`lra list` shows every preset and the tasks it takes"
  else:
    example = "s5" if preset in OWN_ARCHITECTURE_PRESETS else mixer
    fix = f"name the task and mixer: `lra run {task} {example} --preset {preset}`"
  raise errors.BadValue(f"the bare `lra` runs the demo and takes --preset "
                        f"{' or '.join(DEMO_PRESETS)}, not '{preset}'; {fix}.")


def main(args: argparse.Namespace, overrides: list[str]) -> int:
  options = argparse.Namespace(**{name[len(_PREFIX):]: value for name, value in vars(args).items()
                                  if name.startswith(_PREFIX)})
  task, mixer, preset = choice(options.preset)
  if not options.dry_run:
    print("lra demo: bidirectional Latte on generated ListOps, on this machine's CPU/GPU.\n"
          "The demo data is easier than LRA's ListOps (expressions of depth <= 4, 8-80 tokens, "
          "instead of depth 10, length 500-2000) so that a small model learns it in minutes; the "
          "full task on a CPU: `lra run listops latte --preset laptop`.", file=sys.stderr)
  return run_command.start(task, mixer, preset, options, overrides, on_result=_gain)


def _gain(result: dict) -> None:
  if result["test_accuracy"] is not None:
    gain = 100 * (result["test_accuracy"] - result["majority_accuracy"])
    print(f"  {gain:+.1f} points over the majority class")
