"""Pathfinder 32x32 (2 classes, 1,024 pixel tokens), from the release or the generator.

  lra data generate pathfinder --out DIR        # or bring lra_release/pathfinder32
  lra data prepare pathfinder --source DIR
  lra run pathfinder latte                      # preset paper: Latte paper Table 4 settings
  lra run pathfinder softmax --preset lra       # original LRA transformer config
  lra run pathfinder softmax --preset smoke     # generated hard 32x32 set, seconds on a CPU
  lra run pathfinder latte --preset laptop      # LRA's task made by the run itself, on a CPU
  lra run pathfinder latte --preset squares     # NOT LRA's task: 4x4 pixel squares, 64 tokens
"""
from __future__ import annotations

import ml_collections

from lra.configs import common, published

NUM_TRAIN = 160_000  # 80% of the 200k release images
# Self-pretraining (common.SptRow): the SPT paper's mask ratio, loss and budget for this task.
SPT = common.SptRow(mask_ratio=0.5, loss="ce", epochs=50, warmup_steps=2500)
# The `laptop` budget: what softmax, the slowest mixer of the common block, trains in under 3 hours
# on a 2-core CPU (2.16 s a step, docs/presets_cpu.md "Pathfinder on a CPU").
LAPTOP_STEPS, LAPTOP_BATCH, LAPTOP_EVALS = 4000, 32, 8
# Latte paper Table 4, Pathfinder row (L=40: the headline Latte model; see docs/protocol.md).
PAPER = common.PaperRow(dim=256, latents=40, learning_rate=1e-3, batch_size=64,
                        weight_decay=0.03, dropout=0.2, epochs=200)
# The `squares` budget (docs/presets_cpu.md "Pathfinder on squares"): 4 epochs of 32 on the easy
# set, which the slowest mixer kept trains in under 45 minutes on one core; evaluated 10 times.
SQUARES_STEPS, SQUARES_EVALS, SQUARES_PATCH = 20_000, 10, 4


def defaults(preset: str, mixer: str) -> ml_collections.ConfigDict:
  """What this task's presets start from (`lra run --dry-run` tells them apart by it)."""
  return common.base_config("pathfinder", preset, mixer, tokens=False)


# The presets this task takes (--preset; common.parse_arg says whose another one is).
PRESETS = (*common.PRESETS, *common.CPU_PRESETS, *common.PUBLISHED_PRESETS)


def get_config(arg: str = "paper") -> ml_collections.ConfigDict:
  preset, mixer = common.parse_arg(arg, PRESETS, task="pathfinder")
  c = defaults(preset, mixer)
  c.eval.batch_size = 256
  if preset in ("paper", "latte_code", "lra", *common.CPU_PRESETS):
    common.lra_pixel_blocks(c)
  if preset in ("paper", "latte_code"):
    common.paper(c, PAPER, NUM_TRAIN)
    # The Latte-RGLRU(-SWA)++ rows use L=256 here (ICLR version, Table 8).
    c.mixers.latte_rglru.num_latents = c.mixers.latte_rglru_swa.num_latents = 256
    if preset == "latte_code":
      # configs/lra_pathf.yaml: L=256, lr 4e-3, pixels scaled to [-1, 1] and embedded densely.
      common.latte_code(c, latents=256, learning_rate=4e-3, embedding="dense")
  elif preset == "lra":
    # LRA pathfinder32 transformer config: 1 layer, 4 heads, emb 128, MLP 128, dropout 0.2, mean
    # pooling, batch 512, lr 1e-3.
    c.model.num_layers, c.model.num_heads, c.model.dim, c.model.mlp_dim = 1, 4, 128, 128
    c.model.dropout = 0.2
    common.lra_cosine(c, batch_size=512, learning_rate=1e-3, num_train=NUM_TRAIN)
    c.mixers.reformer.chunk_len = common.lra_reformer_chunk(1024)  # mean pooling, no CLS
  elif preset == "laptop":
    laptop(c)
  elif preset == "laptop_published":
    # S5's or Mega-Chunk's own Pathfinder architecture and optimizer on the laptop's data and
    # budget, its schedule compressed to fit.
    laptop(c)
    published.apply(c, NUM_TRAIN)
    published.on_a_budget(c, examples=LAPTOP_STEPS * LAPTOP_BATCH, evaluations=LAPTOP_EVALS)
  elif preset == "squares":
    squares(c)
  elif preset == "squares_published":
    squares_published(c)
  elif preset == "published":
    published.apply(c, NUM_TRAIN)
  else:
    # Generated hard 32x32 images (the LRA task itself, only fewer of them): the smoke preset
    # checks the pipeline end to end; the demo trains a small model for a few minutes.
    smoke = preset == "smoke"
    common.small_generated(c, smoke_size=smoke, generator=dict(
        resolution=32, difficulty="hard", num_images=200 if smoke else 4000, seed=1234))
    if not smoke:
      c.model.num_layers = 2
      common.set_latents(c, 32)
      c.train.batch_size = 64
      c.train.num_steps = 2000
      c.train.learning_rate = 1e-3
    c.eval.batch_size = 20 if smoke else 200
  common.spt(c, SPT, NUM_TRAIN)
  c.lock()
  return c


def laptop(c: ml_collections.ConfigDict) -> None:
  """LRA's Pathfinder on a 2-core CPU: the task as LRA ran it, a small model, a CPU's budget.

  Data: LRA's hard 32x32 set (contour length 14) of 200,000 images, made by the run itself with
  the suite's generator (seed 0), split 80/10/10 as LRA did, all 1,024 pixels of an image as
  tokens. Model: the ListOps `laptop` block (2 layers, D=64, 4 heads, MLP 128) for every mixer,
  LRA's fixed positions and pixel tokens. Optimizer: LRA's Pathfinder one (Adam(0.9, 0.98, 1e-9),
  lr 1e-3, no weight decay, linear warm-up then cosine decay, no clipping) for 4,000 steps of 32
  (0.8 epoch), evaluated every 500 steps on the first 2,000 images of val and of test. The
  values and their sources: docs/presets_cpu.md; the study behind them:
  results/pathfinder_study/README.md.
  """
  c.data.cache_name = "pathfinder_laptop"
  c.data.generate = True
  c.data.generator = ml_collections.ConfigDict(dict(
      resolution=32, difficulty="hard", num_images=200_000, seed=0))
  c.model.num_layers, c.model.num_heads, c.model.dim, c.model.mlp_dim = 2, 4, 64, 128
  # Under one epoch no image is seen twice: nothing to regularise (LRA: 0.2 over 200 epochs).
  c.model.dropout = 0.0
  c.train.dropout_bits = "paired"  # as ListOps' laptop, should an override turn dropout on
  c.mixers.softmax.query_chunk = 128  # the same values, far less memory (ListOps' laptop)
  common.lra_cosine(c, batch_size=LAPTOP_BATCH, learning_rate=1e-3, num_train=NUM_TRAIN)
  c.train.num_steps = LAPTOP_STEPS
  c.train.warmup_steps = LAPTOP_STEPS // 10  # LRA: one epoch of 200; ours: a tenth of the run
  c.eval.every_steps = c.checkpoint.every_steps = LAPTOP_STEPS // LAPTOP_EVALS
  c.eval.max_examples = 2000  # 20,000 + 20,000 images every 500 steps would cost softmax hours
  c.eval.batch_size = 256
  c.mixers.reformer.chunk_len = common.lra_reformer_chunk(1024)
  c.mixers.s5.state_size, c.mixers.s5.blocks = 256, 8  # S5's own Pathfinder state (P=256, J=8)


def squares(c: ml_collections.ConfigDict) -> None:
  """NOT LRA's Pathfinder: the easy set with each 4x4 pixel square one token (64 tokens), where
  mixers learn on a CPU's budget (at LRA's 1,024 pixel tokens every one stays at chance there).

  The `laptop` preset's model and optimizer for every mixer, with three changes, each from the
  Pathfinder study and the squares pilot (docs/presets_cpu.md "Pathfinder on squares"): the easy
  contours (length 6) of the generator, 200,000 images (seed 0) split 80/10/10; pixels read as
  numbers (model.embedding=dense) and 4x4 squares as tokens (model.patch=4); 20,000 steps of 32 (4
  epochs), warm-up 1,000, evaluated every 2,000 steps on the first 4,000 images of val and test.
  Windows, blocks and chunks shrink with the sequence (1/16: 64 of 1,024), so each sparse
  pattern covers the share of the image it covers at LRA's length instead of all of it; fixed-size
  summaries (Latte's latents, Luna's packed rows, Linformer's k, Performer's features) stay.
  """
  laptop(c)
  c.data.generator.difficulty = "easy"
  c.model.embedding, c.model.patch = "dense", SQUARES_PATCH
  c.train.num_steps, c.train.warmup_steps = SQUARES_STEPS, 1000
  c.eval.every_steps = c.checkpoint.every_steps = SQUARES_STEPS // SQUARES_EVALS
  c.eval.max_examples = 4000
  tokens = 1024 // SQUARES_PATCH ** 2
  m, shrink = c.mixers, SQUARES_PATCH ** 2
  m.bigbird.block //= shrink                                   # 64 -> 4
  m.longformer.window //= shrink                               # 512 -> 32
  m.latte_macchiato.window //= shrink                          # 128 -> 8
  m.latte_rglru_swa.window //= shrink                          # 128 -> 8
  m.mega.chunk_size //= shrink                                 # 128 -> 8
  m.local.block //= shrink                                     # 64 -> 4
  m.sinkhorn.block //= shrink                                  # 64 -> 4
  m.sparse.block //= shrink                                    # 50 -> 3
  m.sparse.summary //= shrink                                  # 10 -> 0: each block's first cell
  m.reformer.chunk_len = common.lra_reformer_chunk(tokens)     # 103 -> 7: ten chunks, as LRA's
  # Self-pretraining predicts a hidden square's 16 pixels in 16 levels each (value // 16): at the
  # paper's 256 a step cost 8x a classification step (the head's D x 16 x 256 outputs per token,
  # 4.0 against 33.7 steps/s for Latte on one core), which compute-matching by steps would hide.
  c.spt.pixel_levels = 16


def squares_published(c: ml_collections.ConfigDict) -> None:
  """S5's or Mega-Chunk's own Pathfinder block (its layer, norm, positions and optimizer recipe,
  configs/published.py) at the `squares` model's size, data and budget: beside the common-block
  row it differs in the block alone. Sizes that grow with the width keep their published ratio
  to it (Mega: hidden 2 D, z D/2)."""
  squares(c)
  sizes = c.model.num_layers, c.model.dim, c.model.num_heads
  patterns = c.mixers.mega.chunk_size, c.mixers.s5.state_size, c.mixers.s5.blocks
  published.apply(c, NUM_TRAIN)
  c.model.num_layers, c.model.dim, c.model.num_heads = sizes
  c.mixers.mega.chunk_size, c.mixers.s5.state_size, c.mixers.s5.blocks = patterns
  if c.model.mixer == "mega":
    c.model.mlp_dim = c.mixers.mega.hidden_dim = 2 * c.model.dim
    c.mixers.mega.z_dim = c.model.dim // 2
  c.train.batch_size = c.eval.batch_size = LAPTOP_BATCH
  published.on_a_budget(c, examples=SQUARES_STEPS * LAPTOP_BATCH, evaluations=SQUARES_EVALS)
  c.eval.max_examples = 4000
