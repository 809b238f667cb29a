"""Text (byte-level IMDb, 4000 tokens, 2 classes).

  lra data prepare text --source ~/data/aclImdb_v1.tar.gz   # once (add --option
                                                              # val_from_train_fraction=0.1 to
                                                              # validate on held-out train)
  lra run text latte                                          # preset paper: Latte Table 4
  lra run text softmax --preset lra                           # original LRA base config
  lra run text softmax --preset smoke                         # a few steps, tiny model
"""
from __future__ import annotations

import ml_collections

from lra.configs import common, published

NUM_TRAIN = 25_000
# Self-pretraining (common.SptRow): the SPT paper's mask ratio, loss and budget for this task.
SPT = common.SptRow(mask_ratio=0.15, loss="ce", epochs=32, warmup_steps=5000)
# Latte paper Table 4, Text row (L=40: the headline Latte model; see docs/protocol.md).
PAPER = common.PaperRow(dim=256, latents=40, learning_rate=1e-3, batch_size=32,
                        weight_decay=0.05, dropout=0.1, epochs=32)


def defaults(preset: str, mixer: str) -> ml_collections.ConfigDict:
  """What this task's presets start from (`lra run --dry-run` tells them apart by it)."""
  return common.base_config("text", preset, mixer, tokens=True)


# The presets this task takes (--preset; common.parse_arg says whose another one is).
PRESETS = ("paper", "latte_code", "lra", "smoke", "published")


def get_config(arg: str = "paper") -> ml_collections.ConfigDict:
  preset, mixer = common.parse_arg(arg, PRESETS, task="text")
  c = defaults(preset, mixer)
  if preset in ("paper", "latte_code"):
    common.paper(c, PAPER, NUM_TRAIN)
    common.sorted_micro_batches(c)  # reviews of a few hundred to 4,000 bytes
    # The Latte-RGLRU(-SWA)++ rows use L=256 here (ICLR version, Table 8).
    c.mixers.latte_rglru.num_latents = c.mixers.latte_rglru_swa.num_latents = 256
    c.eval.batch_size = 32
    if preset == "latte_code":
      common.latte_code(c, latents=256)  # configs/lra_imdb.yaml
  elif preset == "lra":
    # LRA text_classification/configs/base_tc_config.py: 4 layers, 4 heads, D=256, MLP 1024,
    # CLS pooling, 20k steps, warm-up 8000. LRA evaluated every 100 steps on all 25k test
    # reviews; we do so every 1000.
    c.model.num_layers, c.model.num_heads, c.model.dim, c.model.mlp_dim = 4, 4, 256, 1024
    c.model.pooling = "cls"
    common.lra_rsqrt(c, num_steps=20_000, warmup_steps=8000)
    common.sorted_micro_batches(c)
    c.mixers.reformer.chunk_len = common.lra_reformer_chunk(4001)  # CLS + 4000
    c.eval.batch_size = 32
    c.eval.every_steps = c.checkpoint.every_steps = 1000
  elif preset == "published":
    published.apply(c, NUM_TRAIN)
  else:
    common.smoke(c)
  common.spt(c, SPT, NUM_TRAIN)
  c.lock()
  return c
