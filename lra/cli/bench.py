"""`lra bench`: train-step time and memory per mixer and length (lra.bench.step_time), LRA's
efficiency table beside the published one (--lra-table: lra.bench.lra_table), our layers against
the references users would run instead (--against: lra.bench.against), or one training epoch per
batching mode (--epoch TASK: lra.bench.epoch)."""
from __future__ import annotations

import argparse
from pathlib import Path

from lra.cli.common import add_command


def add_parser(commands) -> None:
  bench = add_command(commands, "bench", "train-step time and memory per mixer and length",
                      epilog="Defaults: the Latte paper's Text model (6 layers, D=256, 4 heads, "
                      "batch 32). Any --config.KEY=VALUE applies to every mixer.")
  bench.add_argument("--mixers", help="comma-separated (default: all registered)")
  bench.add_argument("--lengths", help="comma-separated (default 1024,2048,4096,8192,16384; "
                     "--lra-table: 1024,2048,3072,4096)")
  bench.add_argument("--batch", type=int, help="rows per step (default 32; --against: each "
                     "case's paper batch)")
  bench.add_argument("--dim", type=int, help="model width (default 256)")
  bench.add_argument("--layers", type=int, help="default 6 (--lra-table: LRA's 4)")
  bench.add_argument("--heads", type=int, help="default 4")
  bench.add_argument("--steps", type=int, default=5, help="timed steps per record (median; "
                     "--against: calls per side in each round)")
  bench.add_argument("--min-time", type=float, default=1.0, help="keep timing short steps "
                     "until this many seconds have passed")
  bench.add_argument("--warmup", type=int, default=2, help="untimed steps after compiling")
  bench.add_argument("--matmul-n", type=int, help="size of the matmul timed for the FLOP/s peak "
                     "(default 1024 on CPU, 8192 on accelerators)")
  bench.add_argument("--json", type=Path, help="write the records here")
  bench.add_argument("--md", type=Path, help="write the Markdown table here")
  bench.add_argument("--plot", type=Path, help="write the log-log time/memory plot here (PNG)")
  bench.add_argument("--readme", type=Path, help="also write the per-mixer summary into this "
                     "page (docs/performance.md holds the committed one), between "
                     "<!-- lra-bench:start --> and <!-- lra-bench:end -->")
  bench.add_argument("--in-process", action="store_true", help="measure every record in this "
                     "process (faster; peak RSS is then cumulative)")
  bench.add_argument("--xla-log", type=Path, metavar="FILE", help="write XLA's own log (the GPU "
                     "autotuner's included) here; by default it is dropped")
  table = bench.add_argument_group(
      "LRA's efficiency table (--lra-table)", "LRA's Text model (the `lra` preset: 4 layers, 4 "
      "heads, D=256, MLP 1024), batch 32, T=1K-4K, for LRA's mixers we have and latte, s5, mega, "
      "luna; steps/s and memory relative to softmax beside the published ratios (LRA Table 2, "
      "Mega Table 2). On a CPU pass a small --batch.")
  table.add_argument("--lra-table", action="store_true", help="run that table instead; --readme "
                     "writes its block between <!-- lra-table:start --> and <!-- lra-table:end -->")
  against = bench.add_argument_group(
      "against the references (--against [CLONE ...])", "Our Latte, S5 and softmax layers "
      "beside the authors' BidLatte (a clone of raresdolga/latte_transformer), lindermanlab/S5's "
      "S5SSM (a clone of it) and Flax's and JAX's attention (no clone), at the Latte paper's "
      "ListOps and Text shapes: first a check that both compute the same function on shared "
      "weights, then forward + backward times in interleaved rounds and XLA's memory. Cases "
      "whose clone is not named are listed as not run.")
  against.add_argument("--against", nargs="*", type=Path, metavar="CLONE",
                       help="run those cases; --readme writes their block between "
                       "<!-- lra-against:start --> and <!-- lra-against:end -->")
  against.add_argument("--cases", help="comma-separated case names or kinds (latte, s5, "
                       "softmax_flax, softmax_jax; default: all)")
  against.add_argument("--rounds", type=int, default=5, help="interleaved rounds, each timing "
                       "--steps calls per side")
  trainer = bench.add_argument_group(
      "against a model's own trainer (--against-trainer CLONE)", "Our training loop and the "
      "model's own trainer (lindermanlab/S5's or raresdolga/latte_transformer's, from a clone of "
      "it) from the same start on the "
      "same batches, dropout off, each at its own learning rates: loss, parameters and BatchNorm "
      "statistics compared after every step, and the step where they first part. --task and "
      "--preset name the run; --readme writes the block of every record in --json's folder "
      "between <!-- lra-against-trainer:start --> and <!-- lra-against-trainer:end -->.")
  trainer.add_argument("--against-trainer", type=Path, metavar="CLONE",
                       help="the clone of the model's own repository")
  trainer.add_argument("--task", help="the run's task (e.g. pathfinder)")
  trainer.add_argument("--control", action="store_true",
                       help="also compare our loop with our own model and optimizer stepped on "
                       "each whole batch (the same maths, another summation order): how far "
                       "float rounding alone carries two runs apart over the same steps")
  trainer.add_argument("--trainer-steps", type=int, default=200, metavar="N",
                       help="steps each trains (default 200)")
  epoch = bench.add_argument_group(
      "one training epoch (--epoch TASK)", "The time of an epoch of TASK's prepared training "
      "data per batching mode, with compile counts; the model is the preset's (--preset, "
      "--config.*), --mixers picks the mixer (default latte), --steps the timed calls per "
      "program shape.")
  epoch.add_argument("--epoch", metavar="TASK", help="time one epoch of TASK instead")
  epoch.add_argument("--preset", default="paper")
  epoch.add_argument("--data-dir", type=Path, help="prepared data root (default $LRA_DATA_DIR "
                     "or ~/.cache/lra)")
  epoch.add_argument("--modes", default="fixed,batch,sorted2,sorted4,sorted8,bucketing",
                     help="fixed (pad to T), batch (pad to each batch), sortedK (the batch's rows "
                     "by length in K micro-batches, each padded to its own), bucketing")
  epoch.add_argument("--quantum", type=int, help="per-batch padding quantum (default: the "
                     "config's data.pad_quantum)")
  epoch.add_argument("--full-epoch", action="store_true", help="time every step (default: "
                     "time --steps calls per program shape and sum over the epoch's steps)")
  epoch.add_argument("--sample-steps", type=int, metavar="N", help="time N whole steps of each "
                     "mode, evenly spread over the epoch (fewer shapes to compile)")
  bench.set_defaults(handler=main)


def main(args: argparse.Namespace, overrides: list[str]) -> int:
  from lra import errors
  chosen = [flag for flag, on in (("--epoch", args.epoch), ("--lra-table", args.lra_table),
                                  ("--against", args.against is not None),
                                  ("--against-trainer", args.against_trainer)) if on]
  if len(chosen) > 1:
    raise errors.BadValue(f"lra bench: {' and '.join(chosen)} are separate measurements; pass "
                          "one of them per command.")
  if args.lra_table:
    from lra.bench import lra_table
    return lra_table.main(args, overrides)
  if args.against is not None:
    from lra.bench import against
    return against.main(args, overrides)
  if args.against_trainer:
    from lra.bench import against_trainer
    return against_trainer.main(args, overrides)
  if args.epoch:
    from lra.bench import epoch
    return epoch.main(args, overrides)
  from lra.bench import step_time
  return step_time.main(args, overrides)
