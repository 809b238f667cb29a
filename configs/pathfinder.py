"""Pathfinder (32x32 = 1024 pixel tokens, 2 classes; difficulty hard by default).

  lra data prepare pathfinder --source ~/data/lra_release     # once; --option difficulty=easy
  lra run pathfinder latte                                    # preset paper: Latte Table 4
  lra run pathfinder softmax --preset lra                     # original LRA config
  lra run pathfinder softmax --preset smoke                   # a few steps, tiny model
"""
from __future__ import annotations

import ml_collections

from configs import common

NUM_TRAIN = 160_000  # 80% of the 200k images of one difficulty


def get_config(arg: str = "paper") -> ml_collections.ConfigDict:
  preset = arg or "paper"
  if preset not in common.PRESETS:
    raise ValueError(f"Unknown preset '{preset}'. Valid presets: {', '.join(common.PRESETS)}")
  if preset == "demo":
    raise ValueError("Preset 'demo' is not defined for Pathfinder yet: use paper, lra or smoke "
                     "on a prepared copy of the release.")
  c = common.base_config()
  c.task = "pathfinder"
  c.preset = preset
  c.data.cache_name = "pathfinder"

  if preset == "paper":
    # Latte paper: D=256, L=256, lr 1e-3 (its code: 4e-3), batch 64, wd 0.03, dropout 0.2,
    # 200 epochs, MLP 4D.
    steps_per_epoch = NUM_TRAIN // 64
    c.model.dim, c.model.mlp_dim = 256, 1024
    c.model.dropout = 0.2
    c.mixers.latte.num_latents = 256
    c.train.batch_size = 64
    c.train.learning_rate = 1e-3
    c.train.weight_decay = 0.03
    c.train.num_steps = common.steps_for_epochs(200, NUM_TRAIN, 64)
    c.eval.batch_size = 256
    c.eval.every_steps = steps_per_epoch
    c.checkpoint.every_steps = steps_per_epoch
  elif preset == "lra":
    # Original LRA pathfinder32 transformer: 1 layer, 4 heads, D=128, MLP 128, dropout 0.2, mean
    # pooling, fixed positions, batch 512, 200 epochs, Adam(0.9, 0.98, 1e-9), no weight decay,
    # lr 1e-3 with one epoch of warm-up then cosine.
    steps_per_epoch = NUM_TRAIN // 512
    c.model.num_layers, c.model.num_heads, c.model.dim, c.model.mlp_dim = 1, 4, 128, 128
    c.model.dropout = 0.2
    c.mixers.latte.num_latents = 256
    c.train.batch_size = 512
    c.train.num_steps = common.steps_for_epochs(200, NUM_TRAIN, 512)
    c.train.warmup_steps = steps_per_epoch
    c.train.learning_rate = 1e-3
    c.train.weight_decay = 0.0
    c.train.b1, c.train.b2, c.train.eps = 0.9, 0.98, 1e-9
    c.train.grad_clip_norm = 0.0
    c.eval.batch_size = 512
    c.eval.every_steps = steps_per_epoch
    c.checkpoint.every_steps = steps_per_epoch
  else:
    # Two steps of a one-layer model on whatever is prepared (tests prepare a tiny copy).
    c.model.num_layers, c.model.dim, c.model.num_heads, c.model.mlp_dim = 1, 16, 2, 32
    c.model.dropout = 0.0
    c.mixers.latte.num_latents = 8
    c.train.batch_size = 2
    c.train.num_steps = 2
    c.train.log_every_steps = 1
    c.eval.batch_size = 2
    c.eval.every_steps = 2
    c.checkpoint.every_steps = 2
  common.use_latte_family_settings(c, text=False)
  c.lock()
  return c
