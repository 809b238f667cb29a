"""Defaults shared by every task config, and one settings block per registered mixer.

A task config starts from `base_config()`, sets its preset's values, and returns it locked, so a
mistyped `--config.x.y=...` is an error instead of a silently ignored key.
"""
from __future__ import annotations

import ml_collections

PRESETS = ("paper", "lra", "smoke", "demo")


def mixer_configs() -> ml_collections.ConfigDict:
  """One block per mixer in models.mixers.MIXERS (the tests fail if one is missing)."""
  return ml_collections.ConfigDict({
      "softmax": {},
      "latte": {"num_latents": 40},
  })


def base_config() -> ml_collections.ConfigDict:
  """The Latte paper's protocol (DATA.md): pre-LN, sinusoidal positions, mean pooling, AdamW."""
  c = ml_collections.ConfigDict()
  c.task = ""
  c.preset = ""

  c.data = ml_collections.ConfigDict()
  c.data.cache_name = ""      # folder under --data-dir; defaults to the task name
  c.data.generate = False     # smoke/demo: generate small data when the cache is missing
  c.data.generator = ml_collections.ConfigDict()  # task-specific generator settings

  c.model = ml_collections.ConfigDict()
  c.model.mixer = "latte"
  c.model.num_layers = 6
  c.model.dim = 128
  c.model.num_heads = 4
  c.model.mlp_dim = 512
  c.model.dropout = 0.1
  c.model.embedding = "token"
  c.model.pos_encoding = "sinusoidal"
  c.model.pooling = "mean"

  c.mixers = mixer_configs()

  c.train = ml_collections.ConfigDict()
  c.train.num_steps = 1000
  c.train.batch_size = 32
  c.train.seed = 0
  c.train.learning_rate = 1e-3
  c.train.weight_decay = 0.01
  c.train.schedule = "cosine"      # cosine | rsqrt (original LRA)
  c.train.warmup_steps = 0
  c.train.b1 = 0.9
  c.train.b2 = 0.999
  c.train.eps = 1e-8
  c.train.grad_clip_norm = 1.0     # 0 disables clipping
  c.train.log_every_steps = 50

  c.eval = ml_collections.ConfigDict()
  c.eval.every_steps = 500
  c.eval.batch_size = 64

  c.checkpoint = ml_collections.ConfigDict()
  c.checkpoint.every_steps = 1000
  return c


def steps_for_epochs(num_epochs: int, num_train: int, batch_size: int) -> int:
  """Epoch budgets from the papers, converted to optimizer steps (remainder batches dropped)."""
  return num_epochs * (num_train // batch_size)
