"""Preset `published`: the architecture and hyperparameters of S5's and Mega-Chunk's own LRA rows.

  lra run listops s5 --preset published    # S5's run_lra_listops.sh
  lra run text mega --preset published     # Mega-Chunk's Text run (Mega's README.lra.md)

Every other mixer is compared under the Latte paper's protocol (preset `paper`); these two rows
were obtained with their own blocks and optimizers, which this preset rebuilds. Where each value
comes from, and where we depart, is in docs/protocol.md ("S5, Mega-Chunk and the cheap linear
attention").
"""
from __future__ import annotations

import dataclasses

import ml_collections

from lra import errors

MIXERS = ("s5", "mega")


@dataclasses.dataclass(frozen=True)
class S5Row:
  """One task's S5 run script: layers, H, P (J blocks), batch, epochs, ssm lr, lr_factor, ..."""
  layers: int
  dim: int
  state_size: int
  blocks: int
  batch_size: int
  epochs: int
  ssm_lr: float
  lr_factor: float
  weight_decay: float
  dropout: float
  warmup_epochs: int
  c_init: str
  gate: str = "half_glu1"
  ssm_params: str = "Lambda_re,Lambda_im,log_step,B"
  clip_eigs: bool = False
  dt_min: float = 0.001
  bn_momentum: float = 0.95   # run_train.py's default; the Pathfinder and Path-X scripts set 0.9


# lindermanlab/S5 bin/run_experiments/run_lra_*.sh; ssm_params from each script's opt_config and
# dt_global (s5/train_helpers.py).
_BFAST = "Lambda_re,Lambda_im,log_step"   # BfastandCdecay: B at the global rate, with decay
_DT_GLOBAL = "Lambda_re,Lambda_im,B"      # standard with dt_global: log_step at the global rate
S5_ROWS = {
    "listops": S5Row(8, 128, 16, 8, 50, 40, 1e-3, 3, 0.04, 0.0, 1, "lecun_normal", "half_glu2",
                     _BFAST),
    "text": S5Row(6, 256, 192, 12, 50, 35, 1e-3, 4, 0.07, 0.1, 0, "lecun_normal", "half_glu2",
                  _DT_GLOBAL),
    "retrieval": S5Row(6, 128, 256, 16, 32, 20, 1e-3, 2, 0.05, 0.0, 1, "trunc_standard_normal",
                       ssm_params=_DT_GLOBAL),
    "image": S5Row(6, 512, 384, 3, 50, 250, 1e-3, 4.5, 0.07, 0.1, 1, "lecun_normal",
                   ssm_params=_BFAST, clip_eigs=True),
    "pathfinder": S5Row(6, 192, 256, 8, 64, 200, 9e-4, 5, 0.03, 0.05, 1, "trunc_standard_normal",
                        bn_momentum=0.9),
    # BandCdecay (B at the SSM rate but with decay) has no group here: B trains with the rest.
    "pathx": S5Row(6, 128, 256, 16, 32, 75, 6e-4, 3, 0.06, 0.0, 1, "complex_normal",
                   ssm_params="Lambda_re,Lambda_im,log_step", dt_min=1e-4, bn_momentum=0.9),
}


@dataclasses.dataclass(frozen=True)
class MegaRow:
  """One task's Mega LRA run: layers, D, hidden (= FFN), z, batch, lr, wd, dropout, updates."""
  layers: int
  dim: int
  hidden: int
  z_dim: int
  batch_size: int
  learning_rate: float
  weight_decay: float
  dropout: float
  num_steps: int
  warmup_steps: int
  block: str = "mega"
  chunk_size: int = 128


# facebookresearch/mega: examples/mega/README.lra.md (optimizer, batch = batch-size x update-freq,
# norm placement) and fairseq/models/lra/model.py (mega_lra_* architectures).
MEGA_ROWS = {
    "listops": MegaRow(6, 80, 160, 64, 64, 1e-3, 0.01, 0.1, 90_000, 3_000),
    "text": MegaRow(4, 128, 256, 64, 50, 4e-3, 0.01, 0.1, 25_000, 10_000),
    "retrieval": MegaRow(6, 128, 256, 64, 64, 3e-3, 0.04, 0.1, 91_960, 10_000),
    "image": MegaRow(8, 160, 320, 96, 50, 1e-2, 0.02, 0.0, 180_000, 9_000, "mega_prenorm"),
    "pathfinder": MegaRow(6, 128, 256, 64, 128, 1e-2, 0.01, 0.0, 250_000, 50_000,
                          "mega_prenorm"),
    # The README leaves Path-X's warm-up as ${WARMUP}; one tenth of the updates is ours.
    "pathx": MegaRow(4, 64, 128, 32, 16, 1e-2, 0.01, 0.0, 125_000, 12_500, "mega_prenorm",
                     chunk_size=4096),
}


def apply(c: ml_collections.ConfigDict, num_train: int) -> None:
  """Rebuilds the published S5 or Mega-Chunk run of `c.task` (the mixer chosen in `c`)."""
  mixer = c.model.mixer
  if mixer not in MIXERS:
    # The like-for-like preset: the same data and budget with our common block for every mixer.
    alike = ("laptop (the same data and budget)" if c.preset == "laptop_published" else
             "paper (the Latte paper's protocol, accelerator-sized)")
    raise errors.BadValue(f"Preset '{c.preset}' rebuilds the S5 and Mega-Chunk rows (mixers "
                          f"{', '.join(MIXERS)}), not '{mixer}'; for a like-for-like comparison of "
                          f"'{mixer}' use --preset {alike}.")
  c.model.pos_encoding = "none"        # both rely on their recurrences for positions
  c.model.head = "mlp" if c.task == "retrieval" else "linear"
  if c.task in ("image", "pathfinder", "pathx"):
    c.model.embedding = "dense"        # both read pixels as numbers, not as tokens
  if mixer == "s5":
    _s5(c, S5_ROWS[c.task], num_train)
  else:
    _mega(c, MEGA_ROWS[c.task])
  c.eval.batch_size = c.train.batch_size


def on_a_budget(c: ml_collections.ConfigDict, *, examples: int, evaluations: int) -> None:
  """Fits a published run into `examples` training examples at its own batch size: the warm-up
  keeps its fraction of the run and the decay ends at the last step; `evaluations` evenly spaced
  evaluations (and checkpoints)."""
  t = c.train
  steps = examples // t.batch_size
  t.warmup_steps = round(t.warmup_steps * steps / t.num_steps)
  t.num_steps = steps
  c.eval.every_steps = c.checkpoint.every_steps = steps // evaluations


def _s5(c: ml_collections.ConfigDict, row: S5Row, num_train: int) -> None:
  c.model.block, c.model.s5_gate = "s5", row.gate
  c.model.norm, c.model.bn_momentum = "batch", row.bn_momentum  # every script: --batchnorm=True
  # BatchNorm's statistics span the batch's rows and positions, pads included: S5's loaders pad
  # every batch to the task's length, and so do we (lra.training.train.setup refuses the rest).
  c.data.padding, c.data.bucketing, c.train.grad_accum_steps = "fixed", False, 1
  c.model.num_layers, c.model.dim = row.layers, row.dim
  c.model.dropout = row.dropout
  c.model.s5_dropout = "s5"  # s5/layers.py: one mask per feature over the sequence, none at input
  c.model.final_norm = False
  s5 = c.mixers.s5
  s5.state_size, s5.blocks, s5.c_init = row.state_size, row.blocks, row.c_init
  s5.ssm_params, s5.clip_eigs, s5.dt_min = row.ssm_params, row.clip_eigs, row.dt_min
  s5.activation = "none"  # the published block applies S5's output layer itself (model.s5_gate)
  steps_per_epoch = num_train // row.batch_size
  t = c.train
  t.batch_size, t.num_steps = row.batch_size, row.epochs * steps_per_epoch
  # s5/train.py's rates: its first step at the peak, warm-up and cosine as its loop sets them
  # (lra bench --against-trainer checks them against S5's code).
  t.schedule, t.warmup_steps = "s5_cosine", row.warmup_epochs * steps_per_epoch
  t.ssm_learning_rate, t.learning_rate = row.ssm_lr, round(row.ssm_lr * row.lr_factor, 10)
  t.weight_decay = row.weight_decay
  t.b1, t.b2, t.eps, t.grad_clip_norm = 0.9, 0.999, 1e-8, 0.0  # optax defaults, no clipping
  c.eval.every_steps = c.checkpoint.every_steps = steps_per_epoch


def _mega(c: ml_collections.ConfigDict, row: MegaRow) -> None:
  c.model.block = row.block
  c.model.num_layers, c.model.dim, c.model.mlp_dim = row.layers, row.dim, row.hidden
  c.model.dropout = row.dropout
  c.model.final_norm = True
  mega = c.mixers.mega
  mega.chunk_size, mega.z_dim, mega.hidden_dim, mega.ema_dim = row.chunk_size, row.z_dim, \
      row.hidden, 16
  t = c.train
  t.batch_size, t.num_steps = row.batch_size, row.num_steps
  t.schedule, t.warmup_steps = "linear", row.warmup_steps
  t.learning_rate, t.weight_decay = row.learning_rate, row.weight_decay
  t.b1, t.b2, t.eps, t.grad_clip_norm = 0.9, 0.98, 1e-8, 1.0
  c.eval.every_steps = c.checkpoint.every_steps = 1000
