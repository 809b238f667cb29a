"""Synthetic "both ends" task: can a mixer carry the first and last real tokens to the CLS output?

  lra run synthetic latte                     # default: T=256, learns in minutes on a CPU
  lra run synthetic performer --preset lra    # the same data, mixers as the LRA code ran them
  lra run synthetic linear --preset smoke     # a few steps on tiny data (tests)
"""
from __future__ import annotations

import ml_collections

from lra.configs import common


def get_config(arg: str = "paper") -> ml_collections.ConfigDict:
  preset = arg or "paper"
  if preset not in common.PRESETS:
    raise ValueError(f"Unknown preset '{preset}'. Valid presets: {', '.join(common.PRESETS)}")
  small = preset == "smoke"
  c = common.base_config()
  c.task = "synthetic"
  c.preset = preset
  # Generated on the fly; one cache per preset (the generator settings differ).
  c.data.cache_name = f"synthetic_{preset}"
  c.data.generate = True
  c.data.generator = ml_collections.ConfigDict(dict(
      num_train=256 if small else 8000, num_val=64 if small else 1000,
      num_test=64 if small else 1000, seq_len=32 if small else 256,
      min_length=4 if small else 32, num_values=4, num_fillers=8, seed=0))
  # CLS pooling: the classifier sees one position, so only the mixer can bring it the two ends.
  c.model.pooling = "cls"
  c.model.num_layers, c.model.dim, c.model.num_heads, c.model.mlp_dim = (
      (1, 32, 2, 64) if small else (2, 64, 4, 128))
  c.model.dropout = 0.0
  c.mixers.latte.num_latents = 8 if small else 16
  c.mixers.latte_macchiato.num_latents = 8 if small else 16
  c.mixers.latte_macchiato.window = 8 if small else 16
  c.mixers.performer.num_features = 16 if small else 64
  # Linformer keeps its default k=256 (= T). It does not learn this task (26.5% with k=32, about
  # 25% with k=256, 2026-11-23), most likely because its fixed length projections weigh the last
  # real token by E[:, t], a factor that changes with the position t where the sequence ends.
  c.mixers.linformer.proj_len = 8 if small else 256
  c.mixers.luna.packed_len = 8 if small else 16
  if preset == "lra":
    common.use_lra_mixer_settings(c)
  c.train.batch_size = 16 if small else 32
  c.train.num_steps = 6 if small else 1500
  c.train.learning_rate = 3e-3 if small else 2e-3
  c.train.weight_decay = 0.01
  c.train.warmup_steps = 0 if small else 100
  c.train.log_every_steps = 2 if small else 100
  c.eval.every_steps = 3 if small else 250
  c.eval.batch_size = 32 if small else 250
  c.checkpoint.every_steps = 3 if small else 1500
  c.lock()
  return c
