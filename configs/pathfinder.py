"""Pathfinder 32x32 (2 classes, 1,024 pixel tokens), from the release or the generator.

  lra data generate pathfinder --out DIR        # or bring lra_release/pathfinder32
  lra data prepare pathfinder --source DIR
  lra run pathfinder latte                      # preset paper: Latte paper Table 4 settings
  lra run pathfinder softmax --preset lra       # original LRA transformer config
  lra run pathfinder softmax --preset smoke     # generated hard 32x32 set, seconds on a CPU
"""
from __future__ import annotations

import ml_collections

from lra.configs import common

NUM_TRAIN = 160_000  # 80% of the 200k release images


def get_config(arg: str = "paper") -> ml_collections.ConfigDict:
  preset = arg or "paper"
  if preset not in common.PRESETS:
    raise ValueError(f"Unknown preset '{preset}'. Valid presets: {', '.join(common.PRESETS)}")
  c = common.base_config()
  c.task = "pathfinder"
  c.preset = preset
  c.data.cache_name = "pathfinder"
  c.eval.batch_size = 256
  steps_per_epoch = NUM_TRAIN // 64

  if preset == "paper":
    # Latte paper: D=256, L=256, lr 1e-3, batch 64, wd 0.03, dropout 0.2, 200 epochs.
    c.model.dim, c.model.mlp_dim = 256, 1024
    c.model.dropout = 0.2
    c.mixers.latte.num_latents = 256
    c.train.batch_size = 64
    c.train.learning_rate = 1e-3
    c.train.weight_decay = 0.03
    c.train.num_steps = common.steps_for_epochs(200, NUM_TRAIN, 64)
    c.eval.every_steps = steps_per_epoch
    c.checkpoint.every_steps = steps_per_epoch
  elif preset == "lra":
    # LRA pathfinder32 transformer: 1 layer, 4 heads, emb 128, MLP 128, dropout 0.2, mean
    # pooling; batch 512, lr 1e-3, one epoch of linear warm-up then cosine, no weight decay, no
    # clipping, 200 epochs.
    steps_per_epoch = NUM_TRAIN // 512
    c.model.num_layers, c.model.num_heads, c.model.dim, c.model.mlp_dim = 1, 4, 128, 128
    c.model.dropout = 0.2
    c.mixers.latte.num_latents = 256
    c.train.batch_size = 512
    c.train.learning_rate = 1e-3
    c.train.weight_decay = 0.0
    c.train.warmup_steps = steps_per_epoch
    c.train.num_steps = common.steps_for_epochs(200, NUM_TRAIN, 512)
    c.train.b1, c.train.b2, c.train.eps = 0.9, 0.98, 1e-9
    c.train.grad_clip_norm = 0.0
    c.eval.every_steps = steps_per_epoch
    c.checkpoint.every_steps = steps_per_epoch
  else:
    small = preset == "smoke"
    # Generated hard 32x32 images (the LRA task itself, only fewer of them): the smoke preset
    # checks the pipeline end to end; the demo trains a small model for a few minutes.
    c.data.cache_name = "pathfinder_smoke" if small else "pathfinder_demo"
    c.data.generate = True
    c.data.generator = ml_collections.ConfigDict(dict(
        difficulty="hard", num_images=200 if small else 4000, seed=1234))
    c.model.num_layers, c.model.dim, c.model.num_heads, c.model.mlp_dim = (
        (1, 32, 2, 64) if small else (2, 64, 4, 128))
    c.model.dropout = 0.0
    c.mixers.latte.num_latents = 8 if small else 32
    c.train.batch_size = 16 if small else 64
    c.train.num_steps = 6 if small else 2000
    c.train.learning_rate = 3e-3 if small else 1e-3
    c.train.weight_decay = 0.01
    c.train.warmup_steps = 0 if small else 100
    c.train.log_every_steps = 2 if small else 100
    c.eval.every_steps = 3 if small else 500
    c.eval.batch_size = 20 if small else 200
    c.checkpoint.every_steps = 3 if small else 1000
  common.use_latte_family_settings(c, text=False)
  c.lock()
  return c
