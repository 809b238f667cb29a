"""Retrieval (AAN citation pairs, 2 x 4000 bytes, 2 classes; one encoder, [u, v, u*v, u-v]).

  lra data prepare retrieval --source ~/data/lra_release      # once
  lra run retrieval latte                                     # preset paper: Latte Table 4
  lra run retrieval softmax --preset lra                      # original LRA base config
  lra run retrieval softmax --preset smoke                    # a few steps, tiny model
"""
from __future__ import annotations

import ml_collections

from lra.configs import common

NUM_TRAIN = 147_086


def get_config(arg: str = "paper") -> ml_collections.ConfigDict:
  preset = arg or "paper"
  if preset not in common.PRESETS:
    raise ValueError(f"Unknown preset '{preset}'. Valid presets: {', '.join(common.PRESETS)}")
  if preset == "demo":
    raise ValueError("Preset 'demo' runs on data the suite generates (listops); retrieval reads "
                     "your LRA release: use paper, lra or smoke.")
  c = common.base_config()
  c.task = "retrieval"
  c.preset = preset
  c.data.cache_name = "retrieval"

  if preset == "paper":
    # Latte paper: D=128, L=40, lr 1e-4, batch 32, wd 0.01, dropout 0.1, 20 epochs, MLP 4D;
    # its code warms up over the first 8% of steps.
    steps_per_epoch = NUM_TRAIN // 32
    c.model.dim, c.model.mlp_dim = 128, 512
    c.mixers.latte.num_latents = 40
    c.train.batch_size = 32
    c.train.learning_rate = 1e-4
    c.train.weight_decay = 0.01
    c.train.num_steps = common.steps_for_epochs(20, NUM_TRAIN, 32)
    c.train.warmup_steps = int(0.08 * c.train.num_steps)
    c.eval.batch_size = 32
    c.eval.every_steps = steps_per_epoch
    c.checkpoint.every_steps = steps_per_epoch
  elif preset == "lra":
    # Original LRA base_match_config: 4 layers, 4 heads, D=128, MLP 512, CLS pooling, batch 32,
    # 5k steps, Adam(0.9, 0.98, 1e-9), wd 0.1, lr 0.05 * linear warm-up (8000) * rsqrt decay:
    # the warm-up outlasts training, as it did there.
    c.model.num_layers, c.model.num_heads, c.model.dim, c.model.mlp_dim = 4, 4, 128, 512
    c.model.pooling = "cls"
    c.mixers.latte.num_latents = 40
    c.train.batch_size = 32
    c.train.num_steps = 5000
    c.train.schedule = "rsqrt"
    c.train.warmup_steps = 8000
    c.train.learning_rate = 0.05
    c.train.weight_decay = 0.1
    c.train.b1, c.train.b2, c.train.eps = 0.9, 0.98, 1e-9
    c.train.grad_clip_norm = 0.0
    c.eval.batch_size = 32
    c.eval.every_steps = 500
    c.checkpoint.every_steps = 500
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
  common.use_latte_family_settings(c, text=True)
  c.lock()
  return c
