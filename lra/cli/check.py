"""`lra check MIXER`: the mixer contract's properties, one PASS/FAIL line each (and --fit, the
fitting screen; --screen, does it mix and does it learn, beside the built-in mixers)."""
from __future__ import annotations

import argparse
import time

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
  parser.add_argument("--screen", action="store_true", help="also screen the mixer: does it mix "
                      "(the synthetic task's two ends at T=128) and does it learn (the fitting "
                      f"screen)? An ETA first, then where it stands beside the built-in mixers: "
                      f"{timings.text('screen')}")
  parser.add_argument("--spt", action="store_true", help="with --screen: also self-pretrain "
                      "for 40%% of each part's steps and fine-tune for the rest, against the "
                      "screen from scratch (twice the time)")
  parser.add_argument("--seed", type=int, default=0, help="with --screen: train.seed of its runs "
                      "(default 0; the committed records have 0 and 1)")
  parser.set_defaults(handler=main)


def _refuse(args: argparse.Namespace) -> None:
  """The options that do not go together, each in one line with the command that does."""
  if args.screen and args.fit:
    raise errors.BadValue("--fit and --screen: the screen's learn part is the fitting screen; "
                          f"drop --fit: lra check {args.mixer} --screen")
  if not args.screen and (args.spt or args.seed):
    flag = "--spt" if args.spt else f"--seed {args.seed}"
    raise errors.BadValue(f"{flag} goes with --screen: lra check {args.mixer} --screen {flag}")
  if args.seed < 0:
    raise errors.BadValue(f"--seed {args.seed}: a seed is 0 or more (the committed records: 0, "
                          "1)")


def main(args: argparse.Namespace, overrides: list[str]) -> int:
  """The contract's properties, one line each; 1 if any fails."""
  _refuse(args)
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
          + (f"; {len(skipped)} skipped until it passes" if skipped else "")
          + (f"; --{'screen' if args.screen else 'fit'} not run: it trains only a layer that "
             "meets the contract" if args.screen or args.fit else ""))
    return 1
  if args.screen:
    return _screen(args, overrides)
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


def _screen(args: argparse.Namespace, overrides: list[str]) -> int:
  """The screen after the contract: its ETA, each part's line, where the mixer stands among the
  built-in mixers' committed records; 1 unless it mixes and learns (from scratch)."""
  from lra.bench import screen
  print(f"lra check: the contract holds; now the screen, seed {args.seed}"
        f"{' (from scratch, then with SPT)' if args.spt else ''}: making its data where missing "
        "and timing its runs", flush=True)
  began = time.monotonic()
  timed = screen.probe(args.mixer, seed=args.seed, spt=args.spt, overrides=overrides)
  print(f"screen: {screen.eta_line(timed)}; timing them took "
        f"{screen.minutes(time.monotonic() - began)}", flush=True)
  scores = screen.screen(args.mixer, seed=args.seed, spt=args.spt, overrides=tuple(overrides),
                         say=lambda text: print(text, flush=True))
  records = screen.load_records()
  scratch, spt = scores[:len(screen.PARTS)], scores[len(screen.PARTS):]
  for group, pretrained in ((scratch, False), (spt, True)):
    for score in group:
      print(f"  {score.part}{' with SPT' if pretrained else ''} beside the built-in mixers: "
            + screen.standing(score.score, score.part, records, pretrained))
  seconds = sum(s.wall_s for s in scratch)
  print(f"  time: {screen.minutes(seconds)} from scratch"
        + screen.time_standing(seconds, records, False))
  for score, tuned in zip(scratch, spt):
    print(f"  {screen.against(tuned, score)}")
  print(f"lra check: {args.mixer} meets the mixer contract; the screen: {screen.verdict(scratch)}"
        + (f" (with SPT: {screen.verdict(spt)})" if spt else "")
        + "; more: docs/mixers.md#the-screen")
  return 0 if all(s.passes for s in scratch) else 1
