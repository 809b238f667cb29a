"""Image (grayscale CIFAR-10, 1024 pixel tokens, 10 classes).

  lra data prepare image --source ~/data/cifar-10-python.tar.gz   # once
  lra run image latte                                             # preset paper: Latte Table 4
  lra run image softmax --preset lra                              # original LRA config
  lra run image softmax --preset smoke                            # a few steps, tiny model
"""
from __future__ import annotations

import ml_collections

from lra.configs import common, published

NUM_TRAIN = 45_000  # LRA's split: the last 10% of CIFAR-10's 50k training images validate
# Self-pretraining (common.SptRow): the SPT paper's mask ratio, loss and budget for this task.
SPT = common.SptRow(mask_ratio=0.5, loss="l1", epochs=50, warmup_steps=2500)
# Latte paper Table 4, Image row.
PAPER = common.PaperRow(dim=512, latents=40, learning_rate=1e-3, batch_size=32,
                        weight_decay=0.05, dropout=0.1, epochs=200)


def defaults(preset: str, mixer: str) -> ml_collections.ConfigDict:
  """What this task's presets start from (`lra run --dry-run` tells them apart by it)."""
  return common.base_config("image", preset, mixer, tokens=False)


# The presets this task takes (--preset; common.parse_arg says whose another one is).
PRESETS = ("paper", "latte_code", "lra", "smoke", "published")


def get_config(arg: str = "paper") -> ml_collections.ConfigDict:
  preset, mixer = common.parse_arg(arg, PRESETS, task="image")
  c = defaults(preset, mixer)
  c.eval.batch_size = 250
  if preset in ("paper", "latte_code", "lra"):
    common.lra_pixel_blocks(c)
  if preset in ("paper", "latte_code"):
    common.paper(c, PAPER, NUM_TRAIN)
    if preset == "latte_code":
      common.latte_code(c, latents=512)  # configs/lra_cifar10.yaml
  elif preset == "lra":
    # LRA image/configs/cifar10/base_cifar10_config.py (transformer): 1 layer, 1 head, D=32,
    # MLP 64, dropout 0.3 (attention dropout 0.2 there; one rate here), CLS pooling, learned
    # positions, batch 256, lr 5e-4.
    c.model.num_layers, c.model.num_heads, c.model.dim, c.model.mlp_dim = 1, 1, 32, 64
    c.model.dropout = 0.3
    c.model.pooling = "cls"
    c.model.pos_encoding = common.absolute_positions(c.model.mixer, "learned")
    common.lra_cosine(c, batch_size=256, learning_rate=5e-4, num_train=NUM_TRAIN)
    c.mixers.reformer.chunk_len = common.lra_reformer_chunk(1025)  # CLS + 1024
  elif preset == "published":
    published.apply(c, NUM_TRAIN)
  else:
    common.smoke(c)
  common.spt(c, SPT, NUM_TRAIN)
  c.lock()
  return c
