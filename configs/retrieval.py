"""Retrieval (AAN citation pairs, 2 x 4000 bytes, 2 classes; one encoder, [u, v, u*v, u-v]).

  lra data prepare retrieval --source ~/data/lra_release      # once
  lra run retrieval latte                                     # preset paper: Latte Table 4
  lra run retrieval softmax --preset lra                      # original LRA base config
  lra run retrieval softmax --preset smoke                    # a few steps, tiny model
"""
from __future__ import annotations

import ml_collections

from lra.configs import common, published

NUM_TRAIN = 147_086
# Self-pretraining (common.SptRow): the SPT paper's mask ratio, loss and budget for this task.
SPT = common.SptRow(mask_ratio=0.15, loss="ce", epochs=32, warmup_steps=2000)
# Latte paper Table 4, Retrieval row.
PAPER = common.PaperRow(dim=128, latents=40, learning_rate=1e-4, batch_size=32,
                        weight_decay=0.01, dropout=0.1, epochs=20)


def defaults(preset: str, mixer: str) -> ml_collections.ConfigDict:
  """What this task's presets start from (`lra run --dry-run` tells them apart by it)."""
  return common.base_config("retrieval", preset, mixer, tokens=True)


# The presets this task takes (--preset; common.parse_arg says whose another one is).
PRESETS = ("paper", "latte_code", "lra", "smoke", "published")


def get_config(arg: str = "paper") -> ml_collections.ConfigDict:
  preset, mixer = common.parse_arg(arg, PRESETS, task="retrieval")
  c = defaults(preset, mixer)
  # The pair's features [u, v, u*v, u-v] go through an MLP head (LRA code and Latte code alike).
  c.model.head = "mlp"
  c.eval.batch_size = 32
  if preset in ("paper", "latte_code"):
    common.paper(c, PAPER, NUM_TRAIN)
    common.sorted_micro_batches(c)  # a pair's length: its longer document's
    # The paper gives no warm-up; the authors' code warms up over the first 8% of steps.
    c.train.warmup_steps = int(0.08 * c.train.num_steps)
    if preset == "latte_code":
      common.latte_code(c)
  elif preset == "lra":
    # LRA matching/configs/base_match_config.py: 4 layers, 4 heads, D=128, MLP 512, CLS pooling,
    # 5k steps, warm-up 8000 (it outlasts training, as it did there).
    c.model.num_layers, c.model.num_heads, c.model.dim, c.model.mlp_dim = 4, 4, 128, 512
    c.model.pooling = "cls"
    common.lra_rsqrt(c, num_steps=5000, warmup_steps=8000)
    common.sorted_micro_batches(c)
    c.mixers.reformer.chunk_len = common.lra_reformer_chunk(4001)  # CLS + 4000 per document
    c.eval.every_steps = c.checkpoint.every_steps = 500
  elif preset == "published":
    published.apply(c, NUM_TRAIN)
  else:
    common.smoke(c)
  common.spt(c, SPT, NUM_TRAIN)
  c.lock()
  return c
