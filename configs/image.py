"""Image (grayscale CIFAR-10, 1024 pixel tokens, 10 classes).

  lra data prepare image --source ~/data/cifar-10-python.tar.gz   # once
  lra run image latte                                             # preset paper: Latte Table 4
  lra run image softmax --preset lra                              # original LRA config
  lra run image softmax --preset smoke                            # a few steps, tiny model
"""
from __future__ import annotations

import ml_collections

from lra.configs import common

NUM_TRAIN = 45_000


def get_config(arg: str = "paper") -> ml_collections.ConfigDict:
  preset = arg or "paper"
  if preset not in common.PRESETS:
    raise ValueError(f"Unknown preset '{preset}'. Valid presets: {', '.join(common.PRESETS)}")
  if preset == "demo":
    raise ValueError("Preset 'demo' runs on data the suite generates (listops); image reads "
                     "your CIFAR-10 copy: use paper, lra or smoke.")
  c = common.base_config()
  c.task = "image"
  c.preset = preset
  c.data.cache_name = "image"

  if preset == "paper":
    # Latte paper: D=512, L=40, lr 1e-3, batch 32, wd 0.05, dropout 0.1, 200 epochs, MLP 4D.
    steps_per_epoch = NUM_TRAIN // 32
    c.model.dim, c.model.mlp_dim = 512, 2048
    c.mixers.latte.num_latents = 40
    c.train.batch_size = 32
    c.train.learning_rate = 1e-3
    c.train.weight_decay = 0.05
    c.train.num_steps = common.steps_for_epochs(200, NUM_TRAIN, 32)
    c.eval.batch_size = 250
    c.eval.every_steps = steps_per_epoch
    c.checkpoint.every_steps = steps_per_epoch
  elif preset == "lra":
    # Original LRA cifar10 transformer: 1 layer, 1 head, D=32, MLP 64, dropout 0.3 (attention
    # dropout 0.2 there; one rate here), CLS pooling, learned positions, batch 256, 200 epochs,
    # Adam(0.9, 0.98, 1e-9), no weight decay, lr 5e-4 with one epoch of warm-up then cosine.
    steps_per_epoch = NUM_TRAIN // 256
    c.model.num_layers, c.model.num_heads, c.model.dim, c.model.mlp_dim = 1, 1, 32, 64
    c.model.dropout = 0.3
    c.model.pooling = "cls"
    c.model.pos_encoding = "learned"
    c.mixers.latte.num_latents = 40
    c.train.batch_size = 256
    c.train.num_steps = common.steps_for_epochs(200, NUM_TRAIN, 256)
    c.train.warmup_steps = steps_per_epoch
    c.train.learning_rate = 5e-4
    c.train.weight_decay = 0.0
    c.train.b1, c.train.b2, c.train.eps = 0.9, 0.98, 1e-9
    c.train.grad_clip_norm = 0.0
    c.eval.batch_size = 250
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
