"""ListOps (10 classes, nested list operations up to length 2000).

  lra run listops latte                      # preset paper: Latte paper Table 4 settings
  lra run listops softmax --preset lra       # original LRA base config
  lra run listops latte --preset demo        # generated small ListOps, minutes on a CPU
"""
from __future__ import annotations

import ml_collections

from lra.configs import common

NUM_TRAIN = 96_000  # release / generator default


def get_config(arg: str = "paper") -> ml_collections.ConfigDict:
  preset = arg or "paper"
  if preset not in common.PRESETS:
    raise ValueError(f"Unknown preset '{preset}'. Valid presets: {', '.join(common.PRESETS)}")
  c = common.base_config()
  c.task = "listops"
  c.preset = preset
  c.data.cache_name = "listops"
  c.eval.batch_size = 64

  if preset == "paper":
    # Latte paper: D=128, L=40, lr 1e-3, batch 64, wd 0.01, dropout 0.1, 50 epochs.
    c.model.dim, c.model.mlp_dim = 128, 512
    c.mixers.latte.num_latents = 40
    c.train.batch_size = 64
    c.train.learning_rate = 1e-3
    c.train.weight_decay = 0.01
    c.train.num_steps = common.steps_for_epochs(50, NUM_TRAIN, 64)
    c.eval.every_steps = 1500
    c.checkpoint.every_steps = 1500
  elif preset == "lra":
    # Original LRA base: 4 layers, 8 heads, D=512, MLP 1024, batch 32, 5k steps, Adam(0.9, 0.98,
    # 1e-9), wd 0.1, lr 0.05 * linear warm-up * rsqrt decay.
    c.model.num_layers, c.model.num_heads, c.model.dim, c.model.mlp_dim = 4, 8, 512, 1024
    c.mixers.latte.num_latents = 40
    c.train.batch_size = 32
    c.train.num_steps = 5000
    c.train.schedule = "rsqrt"
    c.train.warmup_steps = 1000
    c.train.learning_rate = 0.05
    c.train.weight_decay = 0.1
    c.train.b1, c.train.b2, c.train.eps = 0.9, 0.98, 1e-9
    c.train.grad_clip_norm = 0.0
    common.use_lra_mixer_settings(c)
    c.eval.every_steps = 500
    c.checkpoint.every_steps = 500
  else:
    small = preset == "smoke"
    # Generated ListOps with short sequences and shallow trees, so a CPU learns it in minutes
    # (the full task needs lengths 500-2000 and depth 10, i.e. a GPU).
    c.data.cache_name = "listops_smoke" if small else "listops_demo"
    c.data.generate = True
    c.data.generator = ml_collections.ConfigDict(dict(
        num_train=256 if small else 6000, num_val=64 if small else 500,
        num_test=64 if small else 1000, min_length=1 if small else 8,
        max_length=32 if small else 80, max_depth=3 if small else 4, max_args=4 if small else 5,
        seed=1234))
    c.model.num_layers, c.model.dim, c.model.num_heads, c.model.mlp_dim = (
        (1, 32, 2, 64) if small else (4, 64, 4, 128))
    c.model.dropout = 0.0
    c.mixers.latte.num_latents = 8 if small else 16
    # Tiny sequences need few features, projections and packed rows.
    c.mixers.latte_macchiato.num_latents = 8 if small else 16
    c.mixers.latte_macchiato.window = 16
    c.mixers.performer.num_features = 32 if small else 64
    c.mixers.linformer.proj_len = 16 if small else 32
    c.mixers.luna.packed_len = 8 if small else 16
    c.train.batch_size = 16 if small else 32
    c.train.num_steps = 6 if small else 4000
    c.train.learning_rate = 3e-3 if small else 2e-3
    c.train.weight_decay = 0.01
    c.train.warmup_steps = 0 if small else 100
    c.train.log_every_steps = 2 if small else 100
    c.eval.every_steps = 3 if small else 500
    c.eval.batch_size = 32 if small else 250
    c.checkpoint.every_steps = 3 if small else 1000
  # Demo sequences are 8-80 tokens long: Macchiato's demo window, not the paper's 128.
  common.use_latte_family_settings(
      c, text=True, window=c.mixers.latte_macchiato.window if preset in ("smoke", "demo") else 128)
  c.lock()
  return c
