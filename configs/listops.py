"""ListOps (10 classes, nested list operations up to length 2000).

  lra run listops latte                      # preset paper: Latte paper Table 4 settings
  lra run listops softmax --preset lra       # original LRA base config
  lra run listops latte --preset demo        # generated small ListOps, minutes (`lra list`)
"""
from __future__ import annotations

import ml_collections

from lra.configs import common, published

NUM_TRAIN = 96_000  # release / generator default
# Self-pretraining (common.SptRow): the SPT paper's mask ratio, loss and budget for this task.
SPT = common.SptRow(mask_ratio=0.1, loss="ce", epochs=100, warmup_steps=2000)
LAPTOP_STEPS, LAPTOP_BATCH = 5000, 32  # the LRA base config's budget, which `laptop` keeps
# Latte paper Table 4, ListOps row.
PAPER = common.PaperRow(dim=128, latents=40, learning_rate=1e-3, batch_size=64,
                        weight_decay=0.01, dropout=0.1, epochs=50)


def defaults(preset: str, mixer: str) -> ml_collections.ConfigDict:
  """What this task's presets start from (`lra run --dry-run` tells them apart by it)."""
  return common.base_config("listops", preset, mixer, tokens=True)


# The presets this task takes (--preset; common.parse_arg says whose another one is).
PRESETS = (*common.PRESETS, *common.LAPTOP_PRESETS, *common.PUBLISHED_PRESETS)


def get_config(arg: str = "paper") -> ml_collections.ConfigDict:
  preset, mixer = common.parse_arg(arg, PRESETS, task="listops")
  c = defaults(preset, mixer)
  if preset in ("paper", "latte_code"):
    common.paper(c, PAPER, NUM_TRAIN)
    common.sorted_micro_batches(c)  # the paper's batches in fewer padded tokens
    if preset == "latte_code":
      common.latte_code(c)
  elif preset == "lra":
    # LRA listops/configs/base_listops_config.py: 4 layers, 8 heads, D=512, MLP 1024, 5k steps,
    # warm-up 1000, evaluated every 500 steps.
    c.model.num_layers, c.model.num_heads, c.model.dim, c.model.mlp_dim = 4, 8, 512, 1024
    common.lra_rsqrt(c, num_steps=5000, warmup_steps=1000)
    common.sorted_micro_batches(c)
    c.eval.every_steps = c.checkpoint.every_steps = 500
    c.mixers.reformer.chunk_len = common.lra_reformer_chunk(2001)  # LRA's input: CLS + 2000
  elif preset == "laptop":
    laptop(c)
  elif preset == "laptop_published":
    # S5's or Mega-Chunk's own ListOps architecture and optimizer on the laptop's data and budget
    # (160,000 examples), its schedule compressed to fit.
    laptop(c)
    published.apply(c, NUM_TRAIN)
    published.on_a_budget(c, examples=LAPTOP_STEPS * LAPTOP_BATCH, evaluations=10)
  elif preset == "published":
    published.apply(c, NUM_TRAIN)
  else:
    # Generated ListOps with short sequences and shallow trees, so a CPU learns it in minutes
    # (the full task needs lengths 500-2000 and depth 10).
    smoke = preset == "smoke"
    common.small_generated(c, smoke_size=smoke, generator=dict(
        num_train=256 if smoke else 6000, num_val=64 if smoke else 500,
        num_test=64 if smoke else 1000, min_length=1 if smoke else 8,
        max_length=32 if smoke else 80, max_depth=3 if smoke else 4, max_args=4 if smoke else 5,
        seed=1234))
    c.mixers.latte_macchiato.window = c.mixers.latte_rglru_swa.window = 16  # sequences <= 80
  common.spt(c, SPT, NUM_TRAIN)
  c.lock()
  return c


def laptop(c: ml_collections.ConfigDict) -> None:
  """The LRA ListOps task on a 2-core CPU: LRA's data, protocol and budget, a small model.

  Data: the suite's generator with the LRA defaults (96,000 / 2,000 / 2,000 examples, lengths
  500-2000, depth 10, seed 0), i.e. what `lra data generate listops` writes. Optimizer and budget:
  the LRA base config's (5,000 steps of batch 32, Adam(0.9, 0.98), weight decay 0.1, rsqrt
  schedule with 1,000 warm-up steps, evaluated every 500 steps). Model: 2 layers, D=64, 4 heads,
  MLP 128 (the LRA model is 4 x 512; see docs/presets_cpu.md for the measurements behind the size).
  """
  c.data.cache_name = "listops_laptop"
  c.data.generate = True
  c.data.generator = ml_collections.ConfigDict(dict(
      num_train=NUM_TRAIN, num_val=2000, num_test=2000, min_length=500, max_length=2000,
      max_depth=10, max_args=10, seed=0))
  c.model.num_layers, c.model.num_heads, c.model.dim, c.model.mlp_dim = 2, 4, 64, 128
  # Examples are 500-2000 tokens (mean about 1,040): length buckets halve a CPU epoch. They change
  # which examples share a batch, where sorted micro-batches (the paper and lra presets) would
  # not, but buckets pad less still (results/bench/listops_sorted_laptop.md) and the
  # laptop table's committed runs trained with them.
  c.data.padding, c.data.bucketing = "batch", True
  c.train.dropout_bits = "paired"  # half of dropout's hashing: ~10% off a CPU step
  # Softmax's [B,H,T,T] weights 128 queries at a time: the same values, 1.7x faster epochs here.
  c.mixers.softmax.query_chunk = 128
  c.mixers.synthesizer.query_chunk = 128  # its logits are softmax's plus a table: the same trade
  common.lra_rsqrt(c, num_steps=LAPTOP_STEPS, warmup_steps=1000)
  assert c.train.batch_size == LAPTOP_BATCH
  c.mixers.reformer.chunk_len = common.lra_reformer_chunk(2001)  # the LRA model's chunk
  # S5's own ListOps state (run_lra_listops.sh: P=16 in J=8 blocks), not its default P=256, which
  # makes the scans 16x larger: 0.3-0.5 steps/s here, ~4 h for the run (docs/presets_cpu.md).
  c.mixers.s5.state_size, c.mixers.s5.blocks = 16, 8
  c.eval.every_steps = 500
  c.checkpoint.every_steps = 250  # long runs go in parts: lose at most 250 steps to a stop
