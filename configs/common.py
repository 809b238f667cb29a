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
      # vapor: value-acting positional rotations (Latte paper, ICLR version).
      "latte": {"num_latents": 40, "vapor": False},
      # Local window of w=128 (|t-s| <= 64) plus the same 40 latents as Latte.
      "latte_macchiato": {"num_latents": 40, "window": 128},
      # Latent probabilities from y = BiRGLRU(Conv_K(x)); recurrence=False gives Latte-Conv.
      "latte_rglru": {"num_latents": 40, "conv_size": 3, "recurrence": True, "combine": "concat"},
      # The above plus Macchiato's local window; rope=True in the window for token (text) tasks.
      "latte_rglru_swa": {"num_latents": 40, "window": 128, "rope": False, "conv_size": 3,
                          "recurrence": True, "combine": "concat"},
      "linear": {},
      # FAVOR+ with 256 orthogonal features per head; kernel="relu" is what the LRA code ran.
      "performer": {"num_features": 256, "kernel": "softmax", "redraw": False, "seed": 0},
      # Linformer paper's k=256 with separate E, F per head; the LRA code: 16, shared E=F, heads.
      "linformer": {"proj_len": 256, "share_kv": False, "share_heads": False},
      "luna": {"packed_len": 128},
  })


def use_lra_mixer_settings(config: ml_collections.ConfigDict) -> None:
  """The mixer settings the original LRA code ran, for the `lra` presets."""
  config.mixers.performer.kernel = "relu"
  config.mixers.linformer.proj_len = 16
  config.mixers.linformer.share_kv = True
  config.mixers.linformer.share_heads = True


def use_latte_family_settings(config: ml_collections.ConfigDict, *, text: bool,
                              window: int = 128) -> None:
  """Per-task settings of Latte-RGLRU(-SWA) from the Latte paper's ICLR version: the task's Latte
  latent count, a window of 128 with RoPE inside it for token tasks (ListOps, Text, Retrieval),
  and the encoder's absolute positions only for pixel tasks. Call after the preset's Latte
  settings."""
  for name in ("latte_rglru", "latte_rglru_swa"):
    config.mixers[name].num_latents = config.mixers.latte.num_latents
  config.mixers.latte_rglru_swa.window = window
  config.mixers.latte_rglru_swa.rope = text


def base_config() -> ml_collections.ConfigDict:
  """The Latte paper's protocol (DATA.md): pre-LN, sinusoidal positions, mean pooling, AdamW."""
  c = ml_collections.ConfigDict()
  c.task = ""
  c.preset = ""

  c.data = ml_collections.ConfigDict()
  c.data.cache_name = ""      # folder under --data-dir; defaults to the task name
  c.data.generate = False     # smoke/demo: generate small data when the cache is missing
  c.data.generator = ml_collections.ConfigDict()  # task-specific generator settings
  # fixed: every batch padded to the task's length. batch: to its own longest example rounded up
  # to pad_quantum (same results: every mixer ignores pads; with dropout > 0 the masks differ).
  c.data.padding = "fixed"
  c.data.pad_quantum = 128    # bounds the batch lengths, hence XLA compiles, to ceil(T / quantum)
  # Train batches from examples of similar length (tf.data's bucket_by_sequence_length); needs
  # padding=batch. It changes which examples share a batch, so the published presets keep it off.
  c.data.bucketing = False

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
  c.model.dtype = "float32"       # compute dtype: float32 | bfloat16 (params and loss stay fp32)
  c.model.remat = False           # recompute block activations in backward (memory for compute)
  c.model.block = "prenorm"       # prenorm | plusplus (Latte paper's "++" block: gated, RMSNorm)

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
  # Micro-batches per step: batch_size rows in batch_size/k slices, one update (same gradient).
  c.train.grad_accum_steps = 1

  c.eval = ml_collections.ConfigDict()
  c.eval.every_steps = 500
  c.eval.batch_size = 64

  c.checkpoint = ml_collections.ConfigDict()
  c.checkpoint.every_steps = 1000
  c.checkpoint.keep = 2            # latest checkpoints kept (the best one is kept separately)
  return c


def steps_for_epochs(num_epochs: int, num_train: int, batch_size: int) -> int:
  """Epoch budgets from the papers, converted to optimizer steps (remainder batches dropped)."""
  return num_epochs * (num_train // batch_size)
