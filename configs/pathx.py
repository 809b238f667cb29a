"""Path-X (Pathfinder at 128x128 = 16,384 pixel tokens, 2 classes): Pathfinder's config, re-sized.

  lra data prepare pathx --source ~/data/lra_release          # once (200k PNGs, streamed)
  lra run pathx latte                                         # preset paper (see below)
  lra run pathx softmax --preset lra                          # original LRA pathfinder128 config
  lra run pathx softmax --preset smoke                        # a few steps, tiny model

The Latte paper gives no Path-X setting; `paper` uses its Pathfinder row, as LRA's own
pathfinder128 config keeps Pathfinder's 200 epochs.
"""
from __future__ import annotations

import ml_collections

from lra.configs import pathfinder


def get_config(arg: str = "paper") -> ml_collections.ConfigDict:
  if arg == "demo":
    raise ValueError("Preset 'demo' is not defined for Path-X (16K tokens is not a CPU demo): use "
                     "paper, lra or smoke; `lra run pathfinder latte --preset demo` is the "
                     "Pathfinder demo.")
  c = pathfinder.get_config(arg)
  c.task = "pathx"
  # Generated smoke data must never land in the folder of the real (prepared) Path-X set.
  c.data.cache_name = "pathx_smoke" if c.preset == "smoke" else "pathx"
  if c.preset == "lra":
    # Original LRA pathfinder128 base: 1 layer, 2 heads, D=32, MLP 32, dropout 0.1, mean pooling,
    # learned positions, batch 64, grad-norm clip 1.0, otherwise as Pathfinder's.
    steps_per_epoch = pathfinder.NUM_TRAIN // 64
    c.model.num_layers, c.model.num_heads, c.model.dim, c.model.mlp_dim = 1, 2, 32, 32
    c.model.dropout = 0.1
    c.model.pos_encoding = "learned"
    c.train.batch_size = 64
    c.train.num_steps = 200 * steps_per_epoch
    c.train.warmup_steps = steps_per_epoch
    c.train.grad_clip_norm = 1.0
    c.eval.batch_size = 64
    c.eval.every_steps = steps_per_epoch
    c.checkpoint.every_steps = steps_per_epoch
  elif c.preset == "paper":
    c.eval.batch_size = 64  # 16K tokens per example
  elif c.preset == "smoke":
    # Softmax over 16K tokens holds a 1 GB [T,T] matrix per head and example: keep one of each.
    c.model.num_heads = 1
    c.train.batch_size = c.eval.batch_size = 1
    c.data.generator.num_images = 40
  return c
