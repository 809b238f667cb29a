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

from lra.configs import common

NUM_TRAIN = 25_000


def get_config(arg: str = "paper") -> ml_collections.ConfigDict:
  preset = arg or "paper"
  if preset not in common.PRESETS:
    raise ValueError(f"Unknown preset '{preset}'. Valid presets: {', '.join(common.PRESETS)}")
  if preset == "demo":
    raise ValueError("Preset 'demo' runs on data the suite generates (listops); text reads "
                     "your IMDb copy: use paper, lra or smoke.")
  c = common.base_config()
  c.task = "text"
  c.preset = preset
  c.data.cache_name = "text"

  if preset == "paper":
    # Latte paper: D=256, L=256, lr 1e-3, batch 32, wd 0.05, dropout 0.1, 32 epochs, MLP 4D.
    c.model.dim, c.model.mlp_dim = 256, 1024
    c.mixers.latte.num_latents = 256
    c.train.batch_size = 32
    c.train.learning_rate = 1e-3
    c.train.weight_decay = 0.05
    c.train.num_steps = common.steps_for_epochs(32, NUM_TRAIN, 32)
    c.eval.batch_size = 32
    c.eval.every_steps = NUM_TRAIN // 32  # once per epoch
    c.checkpoint.every_steps = NUM_TRAIN // 32
  elif preset == "lra":
    # Original LRA base_tc_config: 4 layers, 4 heads, D=256, MLP 1024, CLS pooling, batch 32,
    # 20k steps, Adam(0.9, 0.98, 1e-9), wd 0.1, lr 0.05 * linear warm-up (8000) * rsqrt decay.
    # LRA evaluated every 100 steps on all 25k test reviews; we do so every 1000.
    c.model.num_layers, c.model.num_heads, c.model.dim, c.model.mlp_dim = 4, 4, 256, 1024
    c.model.pooling = "cls"
    c.mixers.latte.num_latents = 256
    c.train.batch_size = 32
    c.train.num_steps = 20_000
    c.train.schedule = "rsqrt"
    c.train.warmup_steps = 8000
    c.train.learning_rate = 0.05
    c.train.weight_decay = 0.1
    c.train.b1, c.train.b2, c.train.eps = 0.9, 0.98, 1e-9
    c.train.grad_clip_norm = 0.0
    c.eval.batch_size = 32
    c.eval.every_steps = 1000
    c.checkpoint.every_steps = 1000
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
