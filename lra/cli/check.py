"""`lra check MIXER`: the mixer contract's properties, one PASS/FAIL line each (and --fit, the
fitting screen)."""
from __future__ import annotations

import argparse

from lra import errors
from lra.cli.common import add_command
from lra.runs.command import MIXER_HELP


def add_parser(commands) -> None:
  parser = add_command(
      commands, "check", "check one mixer against the mixer contract: a PASS/FAIL line per "
      "property with what was measured; exit 1 if any fails",
      epilog="Settings: --config.mixers.NAME.FIELD=VALUE (NAME: the registered name, or the class"
      " name of an import path).")
  parser.add_argument("mixer", help=MIXER_HELP)
  parser.add_argument("--dim", type=int, default=16, help="D of the small checks (default 16)")
  parser.add_argument("--heads", type=int, default=2, help="H (default 2)")
  from lra.bench.fit_screen import STEPS, TRAIN_IMAGES  # light: no JAX
  from lra.report import timings  # the measured record (a JSON file)
  parser.add_argument("--fit", action="store_true", help="also train the mixer on the fitting "
                      f"screen ({TRAIN_IMAGES} Pathfinder images as 4x4 squares, {STEPS} steps: "
                      f"{timings.text('fit')}): one that cannot fit them will not learn a "
                      "table's task")
  parser.set_defaults(handler=main)


def main(args: argparse.Namespace, overrides: list[str]) -> int:
  """The contract's properties, one line each; 1 if any fails."""
  from lra.configs.common import base_config
  from lra.models.mixers import find_mixer
  from lra.models.mixers.contract import (MEMORY_T, PADS, PROPERTIES, SIGNATURE, MixerContract,
                                          follows_from_finite)
  from lra.runs.config_loading import apply_overrides, use_mixer
  for item in overrides:
    if not item.startswith("mixers."):
      raise errors.BadValue(f"--config.{item}: lra check reads only "
                            "--config.mixers.NAME.FIELD=VALUE (sizes: --dim, --heads).")
  config = base_config("check", "check", "latte", tokens=False)  # only its mixer blocks are read
  config.lock()
  use_mixer(config, args.mixer)
  settings = apply_overrides(config, overrides).mixers[config.model.mixer].to_dict()
  found = find_mixer(args.mixer)
  contract = MixerContract(found.cls, settings, dim=args.dim, num_heads=args.heads)
  print(f"lra check {args.mixer}: {found.cls.__name__}"
        f"({', '.join(f'{k}={v!r}' for k, v in settings.items())}) at D={args.dim}, "
        f"H={args.heads}, T={contract.length} (2 rows, the second ending in {PADS} pads), "
        f"max_len={contract.module.max_len} (T and the {contract.extra_pads} pads the padding "
        f"check appends; {MEMORY_T} for the memory check), called as {SIGNATURE}"
        + (f"; source sha256 {found.source['sha256'][:8]}" if found.source else ""), flush=True)
  failed, skipped, follow = [], [], []
  finite = None
  for name in PROPERTIES:
    result = contract.check(name)
    finite = result if name == "finite" else finite
    if result.skipped and contract.error is not None:
      skipped.append(name)  # after the mixer's own error: one block says it, not a line each
      continue
    consequence = follows_from_finite(finite, result)
    print(result.line() + ("  [follows from finite]" if consequence else ""), flush=True)
    if result.passed is False and result.error is None:
      failed.append(name)
      follow += [name] if consequence else []
    if result.skipped:
      skipped.append(name)
  if contract.error is not None:
    print(f"lra check: {args.mixer} raised an error in its own code (above, where and what); "
          f"mend it and run `lra check {args.mixer}` again ({len(skipped)} properties not checked)")
    return 1
  if failed:
    causes = [name for name in failed if name not in follow]
    print(f"lra check: {len(failed)} of {len(PROPERTIES)} properties fail: {', '.join(causes)}"
          + (f"; {len(follow)} more follow from finite, one cause: y is NaN or inf, which each "
             f"of {', '.join(follow)} reads (mend finite first)" if follow else "")
          + (f"; {len(skipped)} skipped until it passes" if skipped else ""))
    return 1
  if not args.fit:
    print(f"lra check: {args.mixer} meets the mixer contract")
    return 0
  from lra.bench import fit_screen
  print(f"lra check: the contract holds; now the fitting screen ({fit_screen.STEPS} steps)",
        flush=True)
  fit = fit_screen.screen(args.mixer, overrides=tuple(overrides))  # its --config.mixers.*
  print(fit.line(), flush=True)
  print(f"lra check: {args.mixer} meets the mixer contract and "
        + ("fits the screen" if fit.fits else
           f"does not fit the screen ({fit.train_accuracy:.1%} < {fit_screen.BAR:.0%}): it will "
           "not learn a table's task"))
  return 0 if fit.fits else 1
