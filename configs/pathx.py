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

from lra.configs import common, pathfinder, published

# Self-pretraining (common.SptRow): the SPT paper's mask ratio, loss (cross-entropy: its Path-X
# config warns against L1 there) and budget for Path-X.
SPT = common.SptRow(mask_ratio=0.5, loss="ce", epochs=200, warmup_steps=5000)


def defaults(preset: str, mixer: str) -> ml_collections.ConfigDict:
  """Pathfinder's defaults (Path-X is its config, re-sized)."""
  c = pathfinder.defaults(preset, mixer)
  c.task = "pathx"
  return c


# The presets this task takes (--preset; common.parse_arg says whose another one is).
PRESETS = ("paper", "latte_code", "lra", "smoke", "published")


def get_config(arg: str = "paper") -> ml_collections.ConfigDict:
  preset, mixer = common.parse_arg(arg, PRESETS, task="pathx")
  c = pathfinder.get_config(f"{preset},mixer={mixer}")
  c.unlock()
  c.task = "pathx"
  # Generated smoke data must never land in the folder of the real (prepared) Path-X set.
  c.data.cache_name = "pathx_smoke" if preset == "smoke" else "pathx"
  # The LRA code has no Path-X config of Local Attention or Sinkhorn: their encoders' default.
  defaults = common.mixer_configs()
  c.mixers.local.block, c.mixers.sinkhorn.block = defaults.local.block, defaults.sinkhorn.block
  if preset == "lra":
    # LRA pathfinder128 base config: 1 layer, 2 heads, D=32, MLP 32, dropout 0.1, learned
    # positions, batch 64, grad-norm clip 1.0, otherwise as Pathfinder's.
    c.model.num_layers, c.model.num_heads, c.model.dim, c.model.mlp_dim = 1, 2, 32, 32
    c.model.dropout = 0.1
    c.model.pos_encoding = common.absolute_positions(c.model.mixer, "learned")
    common.lra_cosine(c, batch_size=64, learning_rate=1e-3, num_train=pathfinder.NUM_TRAIN)
    c.train.grad_clip_norm = 1.0
    c.mixers.reformer.chunk_len = common.lra_reformer_chunk(16_384)  # mean pooling, no CLS
    c.eval.batch_size = 64
  elif preset == "published":
    published.apply(c, pathfinder.NUM_TRAIN)  # Path-X's own row over Pathfinder's
  elif preset in ("paper", "latte_code"):
    c.eval.batch_size = 64  # 16K tokens per example
  else:
    # Softmax over 16K tokens holds a 1 GB [T,T] matrix per head and example: keep one of each.
    c.model.num_heads = 1
    c.train.batch_size = c.eval.batch_size = 1
    c.data.generator.num_images = 40
    c.data.generator.resolution = 128
  common.spt(c, SPT, pathfinder.NUM_TRAIN)
  c.lock()
  return c
