"""What every task config shares: the defaults, one settings block per mixer, and each preset piece.

A task file (configs/<task>.py) holds that task's facts (its training-set size, its rows of the
papers' tables) and calls the pieces below; each piece is written once, here:
  paper(...)          the Latte paper's protocol for one row of its Table 4 (the default preset);
  latte_code(...)     where the Latte authors' code departs from the paper (preset latte_code);
  lra_rsqrt(...)      the original LRA code's optimizer for ListOps/Text/Retrieval;
  lra_cosine(...)     the original LRA code's optimizer for Image/Pathfinder/Path-X;
  lra_model(...)      the original LRA code's model details and mixer settings;
  smoke(...)          a few steps of a one-layer model on whatever is prepared (tests);
  small_generated(...)  the smoke/demo presets of the tasks whose data the suite generates.
Where each value comes from is in docs/protocol.md.

`get_config(arg)` of a task takes "PRESET" or "PRESET,mixer=NAME" (big_vision's arg style): a
preset may depend on the mixer (the published Latte-RGLRU rows use the "++" block), so the mixer is
chosen before the preset is applied, never patched in afterwards.
"""
from __future__ import annotations

import dataclasses

import ml_collections

from lra import errors

PRESETS = ("paper", "latte_code", "lra", "smoke", "demo")
# S5's and Mega-Chunk's own LRA runs (configs/published.py): the LRA tasks, those two mixers.
PUBLISHED_PRESETS = ("published",)
# The LRA task's own data at full length, with a model a laptop CPU trains in hours (`lra list`);
# laptop_published: the same data and budget with S5's or Mega-Chunk's own architecture.
LAPTOP_PRESETS = ("laptop", "laptop_published")
# Pathfinder only: NOT LRA's task but its easy set on 4x4 pixel squares (64 tokens), where mixers
# learn on a CPU; squares_published: S5's or Mega-Chunk's own architecture there.
SQUARES_PRESETS = ("squares", "squares_published")
CPU_PRESETS = LAPTOP_PRESETS + SQUARES_PRESETS
# Presets that rebuild a published row, so they take only its mixers (s5, mega).
OWN_ARCHITECTURE_PRESETS = ("published", "laptop_published", "squares_published")
LATTE_FAMILY = ("latte", "latte_macchiato", "latte_rglru", "latte_rglru_swa")
# The published "Latte-RGLRU++" and "Latte-RGLRU-SWA++" rows (ICLR version, Table 3) use the ++
# block.
PLUSPLUS_MIXERS = ("latte_rglru", "latte_rglru_swa")


def parse_arg(arg: str, valid: tuple[str, ...] = PRESETS, task: str = "") -> tuple[str, str]:
  """"paper" or "paper,mixer=latte" -> (preset, mixer); the mixer defaults to latte. `valid`:
  the presets of `task`, whose config calls this (its module's PRESETS)."""
  preset, *rest = (arg or "paper").split(",")
  settings = dict(part.split("=", 1) for part in rest if "=" in part)
  unknown = [part for part in rest if "=" not in part] + sorted(set(settings) - {"mixer"})
  if unknown:
    raise errors.BadValue(f"Config arg {arg!r}: expected PRESET or PRESET,mixer=NAME; cannot read "
                          f"{unknown}.")
  if preset not in valid:
    here = f"for {task}" if task else "for this task"
    homes = [name for name, presets in _task_presets().items() if preset in presets]
    if homes:  # `--preset squares` on ListOps: say whose preset it is
      raise errors.BadValue(f"{preset} is a {' and '.join(TITLES.get(h, h) for h in homes)} "
                            f"preset, not one {here}: lra run {homes[0]} MIXER --preset {preset}."
                            f" Valid presets {here}: {', '.join(valid)}")
    raise errors.BadValue(f"Unknown preset '{preset}'. Valid presets {here}: {', '.join(valid)}")
  return preset, settings.get("mixer", "latte")


# The tasks as the papers' tables title them, for the messages above.
TITLES = {"listops": "ListOps", "text": "Text", "retrieval": "Retrieval", "image": "Image",
          "pathfinder": "Pathfinder", "pathx": "Path-X", "synthetic": "synthetic"}


def _task_presets() -> dict[str, tuple[str, ...]]:
  """{task: its presets}, from the PRESETS of each task's config module beside this one."""
  import importlib  # pylint: disable=import-outside-toplevel (an error's path only)
  import pkgutil  # pylint: disable=import-outside-toplevel
  from pathlib import Path  # pylint: disable=import-outside-toplevel
  found = {}
  for info in pkgutil.iter_modules([str(Path(__file__).parent)]):  # common's are no task's
    module = importlib.import_module(f"{__package__}.{info.name}")
    if info.name != "common" and isinstance(getattr(module, "PRESETS", None), tuple):
      found[info.name] = module.PRESETS
  return found


def mixer_configs() -> ml_collections.ConfigDict:
  """One block per mixer in lra.models.mixers.MIXERS (the tests fail if one is missing)."""
  return ml_collections.ConfigDict({
      # query_chunk: queries attended at a time (0: all at once, the T x T weights kept for the
      # backward pass); the same values with far less memory, faster on a CPU at T >= 1K.
      # implementation: auto (cuDNN's fused attention on an NVIDIA GPU in bf16/f16, else the
      # einsum formula) | einsum | xla | cudnn (jax.nn.dot_product_attention's two paths).
      # rope: rotary positions on queries and keys (the SPT paper's Transformers; off in LRA).
      "softmax": {"query_chunk": 0, "implementation": "auto", "rope": False},
      # vapor: value-acting positional rotations (Latte paper, ICLR version). bias: biases on the
      # q, k, v and output projections (none in the paper's equations or the authors' code).
      "latte": {"num_latents": 40, "vapor": False, "bias": False},
      # Local window of w=128 (|t-s| <= 64) plus the same 40 latents as Latte.
      "latte_macchiato": {"num_latents": 40, "window": 128},
      # Latent probabilities from y = BiRGLRU(x): the ICLR version's RG-LRU replaces Latte-Conv's
      # 1-D conv; latent_input="conv" is Latte-Conv (width conv_size, no recurrence). combine:
      # "sum" (one set of gates, both directions added) | "concat" (ours: gates per direction).
      "latte_rglru": {"num_latents": 40, "latent_input": "rglru", "conv_size": 3, "combine": "sum"},
      # The above plus Macchiato's local window; rope=True rotates the window's queries and keys.
      "latte_rglru_swa": {"num_latents": 40, "window": 128, "rope": False, "combine": "sum"},
      "linear": {},
      # FAVOR+ with 256 orthogonal features per head; kernel="relu" is what the LRA code ran.
      # output_dtype: "input" (the float32 kernel's output cast back to x's dtype) | "float32"
      # (kept, as under bfloat16 before 2026-11-28: the output projection then ran in float32).
      "performer": {"num_features": 256, "kernel": "softmax", "redraw": False, "seed": 0,
                    "output_dtype": "input"},
      # Linformer paper's k=256 with separate E, F per head; the LRA code: 16, shared E=F, heads.
      "linformer": {"proj_len": 256, "share_kv": False, "share_heads": False},
      "luna": {"packed_len": 128},
      # Window of w=512 positions and no global token (the LRA code, which made every published
      # Longformer row; num_global=1 with model.pooling=cls is the paper's global [CLS]); global
      # tokens get their own projections (paper and LRA code).
      "longformer": {"window": 512, "num_global": 0, "global_projections": True},
      # ITC: blocks of 64, 3 window + 2 global + 3 random blocks per query block (LRA code).
      "bigbird": {"block": 64, "num_random": 3, "seed": 0},
      # One hash round (LRA code); 32 buckets and chunks of 64 (ours: ~T/c buckets at T=2000);
      # chunks attend to one neighbour on each side (ours: a bidirectional encoder); unit-length
      # keys, and keys of the query's own bucket only (the paper; trax's attend_across_buckets).
      "reformer": {"num_hashes": 1, "num_buckets": 32, "chunk_len": 64, "chunks_before": 1,
                   "chunks_after": 1, "normalize_keys": True, "attend_across_buckets": False,
                   "seed": 0},
      # S5's defaults (run_train.py): P=256 in J=8 HiPPO-N blocks, dt in [1e-3, 1e-1]; ssm_params
      # train at train.ssm_learning_rate without weight decay (S5's "standard" group); activation:
      # S5's layer after the scans (s5/layers.py; --activation_fn, default half_glu1): GELU and a
      # sigmoid gate. "none" is the bare linear SSM (runs before 2026-11-28; docs/mixers.md).
      "s5": {"state_size": 256, "blocks": 8, "c_init": "trunc_standard_normal", "dt_min": 0.001,
             "dt_max": 0.1, "clip_eigs": False, "ssm_params": "Lambda_re,Lambda_im,log_step,B",
             "activation": "half_glu1"},
      # Mega-Chunk: chunks of 128, z 64, values 2 D (hidden_dim 0), EMA dimension 16.
      "mega": {"chunk_size": 128, "z_dim": 64, "hidden_dim": 0, "ema_dim": 16},
      # de Brebisson & Vincent: form basic (C = H^T H) | gated; a LayerNorm and a D x D map read
      # the lookup (docs/protocol.md: its scale grows with T).
      "cheap_linear": {"form": "basic", "output_norm": True, "output_projection": True},
      # The LRA code's Local Attention: blocks of 50 positions (64 on Image and Pathfinder).
      "local": {"block": 50},
      # Sparse Transformer, fixed pattern (LRA code, every task): blocks of l=50, each block's
      # first cell and last c=10 as summaries, one merged head; num_global=1 makes a CLS token
      # global, as the LRA code does when it pools by CLS. Bidirectional (LRA's was causal).
      "sparse": {"block": 50, "summary": 10, "num_global": 0},
      # Sinkhorn: blocks of 50 (LRA code; 64 on Image and Pathfinder); 7 Sinkhorn rounds at
      # temperature 0.75 with Gumbel noise in training (the paper's best); the LRA code ran a row
      # softmax instead (iterations=0, temperature 1, no noise: the `lra` preset).
      "sinkhorn": {"block": 50, "iterations": 7, "temperature": 0.75, "gumbel_noise": True},
      # Synthesizer as LRA ran it: one learned [T,T] logit matrix per head added to dot-product
      # attention (Random + Vanilla); max_length 0 = the model's max_len, CLS included (LRA's).
      # query_chunk as softmax's: how it computes, not what.
      "synthesizer": {"mode": "random", "rank": 32, "dot_product": True, "max_length": 0,
                      "query_chunk": 0},
  })


# Mixers whose recurrences carry positions: the encoder adds no absolute positions to them, as
# their authors run them (S5's and Mega's LRA code). A linear time-invariant scan sums an absolute
# encoding over every token it passes, so the sum changes with the sequence's length: on the
# synthetic task S5 stayed at 32% test with sinusoidal positions and reached 100% without
# (2026-11-26, results/runs/synthetic/README.md).
OWN_POSITIONS = ("s5", "mega")


def absolute_positions(mixer: str, kind: str) -> str:
  """The encoder's absolute positions for `mixer`: `kind`, or "none" where it has its own."""
  return "none" if mixer in OWN_POSITIONS else kind


def base_config(task: str, preset: str, mixer: str, *,
                tokens: bool) -> ml_collections.ConfigDict:
  """The defaults every preset starts from: the Latte paper's encoder and optimizer.

  Args:
    task, preset, mixer: what this config is for.
    tokens: a token task (ListOps, Text, Retrieval): Latte-RGLRU-SWA rotates its window's
      queries and keys (RoPE), as the Latte paper does on these tasks; pixel tasks rely on the
      encoder's absolute positions.
  """
  c = ml_collections.ConfigDict()
  c.task = task
  c.preset = preset

  c.data = ml_collections.ConfigDict()
  c.data.cache_name = task    # folder under --data-dir
  c.data.generate = False     # smoke/demo: generate small data when the cache is missing
  c.data.generator = ml_collections.ConfigDict()  # task-specific generator settings
  # fixed: every batch padded to the task's length. batch: to its own longest example rounded up
  # to pad_quantum (same results: every mixer ignores pads; with dropout > 0 the masks differ).
  # sorted: the batch's rows by length in train.grad_accum_steps micro-batches, each padded to its
  # own longest (the same update; evaluation in length order). See `sorted_micro_batches`.
  c.data.padding = "fixed"
  c.data.pad_quantum = 128    # bounds the batch lengths, hence XLA compiles, to ceil(T / quantum)
  # Train batches from examples of similar length (tf.data's bucket_by_sequence_length); needs
  # padding=batch. It changes which examples share a batch, so the published presets keep it off.
  c.data.bucketing = False

  c.model = ml_collections.ConfigDict()
  c.model.mixer = mixer
  c.model.num_layers = 6            # Latte paper, Section 5 (LRA): 6 layers, 4 heads
  c.model.dim = 128
  c.model.num_heads = 4
  c.model.mlp_dim = 512             # 4 * dim
  c.model.dropout = 0.1
  c.model.embedding = "token"       # token | dense (pixels scaled to [-1, 1], then Dense)
  c.model.patch = 1                 # dense only: p > 1 makes each p x p pixel square one token
  c.model.pos_encoding = absolute_positions(mixer, "sinusoidal")  # sinusoidal | learned | none
  c.model.pooling = "mean"          # mean over real tokens | cls | last (last real token)
  c.model.dtype = "float32"         # compute dtype: float32 | bfloat16 (params and loss fp32)
  c.model.remat = False             # recompute block activations in backward (memory for time)
  # prenorm | plusplus (Latte paper, ICLR version: "++" = RMSNorm and a GLU feed-forward) | s5 |
  # mega | mega_prenorm (the published S5 and Mega layers, models/encoder.py).
  c.model.block = "prenorm"
  c.model.glu = "sigmoid"           # "++" feed-forward gate: sigmoid (GLU, the paper) | gelu
                                    # (GeGLU)
  c.model.mixer_gate = False        # ours: Dense(GELU(Dense h) * Mixer(h)), Griffin-style
  # Where the Latte paper is silent, its authors' code (docs/protocol.md): the MLP drops only its
  # output, no norm before pooling, a linear head for one sequence.
  c.model.mlp_hidden_dropout = False  # True: dropout on the MLP's hidden units too
  c.model.final_norm = False        # True: a norm before pooling (LayerNorm; RMSNorm under "++")
  c.model.head = "linear"           # linear: Dense(C) | mlp: Dense(D)-GELU-Dense(C)
  c.model.s5_gate = "half_glu1"     # block "s5": half_glu1 | half_glu2 (S5's gated output layer)
  c.model.s5_dropout = "elementwise"  # block "s5": elementwise | s5 (S5's masks; encoder.py)
  # block: each block's own norm (LayerNorm; RMSNorm under plusplus) | batch: BatchNorm over batch
  # and time, pads included, running statistics at evaluation (S5's LRA runs, --batchnorm=True).
  c.model.norm = "block"
  c.model.bn_momentum = 0.95        # BatchNorm's running-average momentum (S5's run_train.py)

  c.mixers = mixer_configs()
  c.mixers.latte_rglru_swa.rope = tokens

  c.train = ml_collections.ConfigDict()
  c.train.num_steps = 1000
  c.train.batch_size = 32
  c.train.seed = 0
  c.train.learning_rate = 1e-3
  c.train.weight_decay = 0.01
  c.train.schedule = "cosine"       # cosine (Latte paper) | rsqrt (original LRA) | linear (Mega)
  #                                   | s5_cosine (S5's trainer's rates; lra/training/optim.py)
  c.train.warmup_steps = 0
  c.train.b1 = 0.9                  # AdamW moments (optax defaults)
  c.train.b2 = 0.999
  c.train.eps = 1e-8
  c.train.grad_clip_norm = 1.0      # global norm; 0 disables clipping (Latte code clips at 1)
  # The mixer's `ssm_params` (S5: Lambda, log step, B) train with Adam at this peak rate, same
  # schedule, no weight decay (S5's ssm_lr); 0: train.learning_rate.
  c.train.ssm_learning_rate = 0.0
  c.train.log_every_steps = 50
  # Micro-batches per step: batch_size rows in batch_size/k slices, one update (same gradient);
  # with data.padding=sorted, slices of the rows sorted by length, each at its own length.
  c.train.grad_accum_steps = 1
  # Dropout's random bits: "threefry" (JAX's own; every run before 2026-11-24 used it),
  # "paired" (both words of each threefry block, half the hashing: a 10% faster CPU step for
  # Latte 4x128 at T=2000), or "rbg" / "unsafe_rbg" (XLA's RngBitGenerator, as MaxText and t5x
  # use for dropout; its masks hold for one backend and jaxlib only; lra/training/dropout_rng.py).
  # The masks differ, the distribution does not; initialisation always uses threefry.
  c.train.dropout_bits = "threefry"

  c.eval = ml_collections.ConfigDict()
  c.eval.every_steps = 500
  c.eval.batch_size = 64
  # Evaluations during training read the first N examples of val and test (0: all of them). The
  # splits are seeded random draws, so their first N are a random subset, the same at every
  # evaluation; `lra eval` always reads a whole split.
  c.eval.max_examples = 0

  c.checkpoint = ml_collections.ConfigDict()
  c.checkpoint.every_steps = 1000
  c.checkpoint.keep = 2             # latest checkpoints kept (the best one is kept separately)

  # The curves again, beside metrics.jsonl (the same scalars at the same steps;
  # lra/runs/loggers.py). Where the curves go is not what a run computes: neither key is part of
  # the run's identity.
  c.log = ml_collections.ConfigDict()
  c.log.tensorboard = False         # event files in the run folder (extra: tensorboard)
  c.log.wandb = ""                  # a W&B project name: log the run there (extra: wandb)

  # classify: train on the labels. denoise: self-pretraining (`lra pretrain`), masked denoising of
  # the training split's inputs, no label read (Amos et al., ICLR 2024; lra/training/objectives).
  c.objective = "classify"
  # Self-pretraining (SPT): `lra pretrain TASK MIXER --preset P` trains `spt.pretrain_steps`
  # steps of denoising with P's model and optimizer; `lra run ... --preset P --init-from RUN`
  # fine-tunes from it for `spt.finetune_steps` steps (0: P's train.num_steps). Each task sets
  # its masking and each preset its budget, with sources
  # (docs/presets_spt.md, "Self-pretraining (SPT)").
  c.spt = ml_collections.ConfigDict()
  c.spt.mask_ratio = 0.15           # the share of real tokens hidden (independently per token)
  c.spt.loss = "ce"                 # ce: each hidden value's class | l1: pixel values as numbers
  c.spt.pixel_levels = 256          # ce on pixels: the classes 0-255 is binned into (256: exact)
  c.spt.pretrain_steps = 0          # 0: this preset has no SPT budget (set one to pretrain)
  c.spt.pretrain_warmup_steps = 0
  c.spt.finetune_steps = 0
  c.spt.init_from = ""              # the pretraining run a fine-tune starts from (--init-from)
  c.spt.allow_partial = False       # fine-tune from an unfinished pretraining (--allow-partial)
  # Not a setting: the start `lra run --init-from` records in a fine-tune's config (lra/runs/
  # start.py), which its name, its key in the tables and its resume read.
  c.spt.start = ml_collections.ConfigDict()
  c.spt.start.config_id = ""        # the pretraining's key ("": no start recorded)
  c.spt.start.departures = []       # how the pretraining departs from its preset
  c.spt.start.step = 0              # the step of the checkpoint loaded
  c.spt.start.complete = False      # whether the pretraining was complete then
  return c


@dataclasses.dataclass(frozen=True)
class SptRow:
  """One task's self-pretraining, from Amos et al. (ICLR 2024): the mask ratio (Section 2), the
  loss and the pretraining budget of its code's Transformer run for the task
  (IdoAmos/not-from-scratch, configs/experiment/lra/transformer-lra-<task>-mlm.yaml:
  `trainer.max_epochs`, `scheduler.num_warmup_steps`, `dataset.lm_loss`)."""
  mask_ratio: float
  loss: str
  epochs: int
  warmup_steps: int


# Compute-matched SPT (the paper's Appendix D study spends 0%, 40% or 60% of a fixed budget on
# pretraining): the small presets pretrain this share of their from-scratch steps and fine-tune
# the rest, so an SPT row costs what a from-scratch row does (results/spt/README.md, the pilot).
SPT_SHARE = 0.4
SPT_PROTOCOL_PRESETS = ("paper", "latte_code", "lra", "published")


def spt(c: ml_collections.ConfigDict, row: SptRow, num_train: int, *,
        matched: bool = False) -> None:
  """The `spt` block of a task's preset, set after the preset's own budget: the protocol presets
  pretrain for the paper's epochs (at the preset's batch) and fine-tune for their whole budget,
  as the paper does; every other preset (and every one with `matched`) is compute-matched
  (SPT_SHARE)."""
  c.spt.mask_ratio, c.spt.loss = row.mask_ratio, row.loss
  if c.preset in SPT_PROTOCOL_PRESETS and not matched:
    c.spt.pretrain_steps = row.epochs * (num_train // c.train.batch_size)
    c.spt.pretrain_warmup_steps = row.warmup_steps
    return
  c.spt.pretrain_steps = max(1, round(SPT_SHARE * c.train.num_steps))
  c.spt.finetune_steps = max(1, c.train.num_steps - c.spt.pretrain_steps)
  c.spt.pretrain_warmup_steps = round(SPT_SHARE * c.train.warmup_steps)


def spt_phase(c: ml_collections.ConfigDict) -> None:
  """A self-pretraining phase's budget, from the `spt` block (no-op for a plain run): denoising
  (`objective=denoise`) trains spt.pretrain_steps with spt.pretrain_warmup_steps of warm-up; a
  fine-tune (`spt.init_from` set) trains spt.finetune_steps when the preset sets them. Applied
  before the command's other overrides, so `--config.train.num_steps=N` still has the last word.
  """
  if c.objective == "denoise":
    if c.spt.pretrain_steps <= 0:
      raise errors.BadValue(
          f"preset {c.preset} sets no self-pretraining budget (spt.pretrain_steps=0); pass "
          "--config.spt.pretrain_steps=N, or take a preset with one (lra list)")
    c.train.num_steps = c.spt.pretrain_steps
    c.train.warmup_steps = min(c.spt.pretrain_warmup_steps, c.spt.pretrain_steps)
  elif c.spt.init_from and c.spt.finetune_steps > 0:
    c.train.num_steps = c.spt.finetune_steps


def set_latents(c: ml_collections.ConfigDict, latents: int) -> None:
  """L for every Latte-family mixer at once, so no mixer keeps a stale count."""
  for name in LATTE_FAMILY:
    c.mixers[name].num_latents = latents


def every_epoch(c: ml_collections.ConfigDict, steps_per_epoch: int) -> None:
  """Evaluate and checkpoint once per epoch (both papers evaluate per epoch)."""
  c.eval.every_steps = c.checkpoint.every_steps = steps_per_epoch


# Dropout's generator under the `paper` preset, whose runs are sized for accelerators: the one
# switch that tools/step_probe.py's timings decide (docs/accelerator_check.md). It is a preset
# value, not a guess from the device found, so config.json says what ran and a run packed on a GPU
# resumes under the same config anywhere. Flip it only between rows: a run in progress keeps the
# masks it started with (pin its value with --config.train.dropout_bits).
PAPER_DROPOUT_BITS = "threefry"


@dataclasses.dataclass(frozen=True)
class PaperRow:
  """One task's row of the Latte paper's Table 4 (model width D, latents L, optimizer).

  MLP width is 4D; every mixer of a task shares the row (the comparison the paper makes).
  """
  dim: int
  latents: int
  learning_rate: float
  batch_size: int
  weight_decay: float
  dropout: float
  epochs: int


def paper(c: ml_collections.ConfigDict, row: PaperRow, num_train: int) -> None:
  """The Latte paper's protocol for one task (AdamW, cosine decay, grad-norm clip 1.0).

  Args:
    row: the task's Table 4 row.
    num_train: training examples, to turn the epoch budget into steps (remainder dropped).
  """
  c.model.dim, c.model.mlp_dim = row.dim, 4 * row.dim
  c.model.dropout = row.dropout
  set_latents(c, row.latents)
  if c.model.mixer in PLUSPLUS_MIXERS:
    c.model.block = "plusplus"
  steps_per_epoch = num_train // row.batch_size
  c.train.batch_size = row.batch_size
  c.train.learning_rate = row.learning_rate
  c.train.weight_decay = row.weight_decay
  c.train.num_steps = row.epochs * steps_per_epoch
  c.train.dropout_bits = PAPER_DROPOUT_BITS
  every_epoch(c, steps_per_epoch)


# Micro-batches per batch under sorted padding (docs/protocol.md, "Sorted micro-batches"): on
# ListOps k=4 computes about two thirds of fixed padding's tokens (results/bench/
# listops_sorted_paper.md has each k's share) while each micro-batch keeps B/4 rows to fill an
# accelerator.
SORTED_MICRO_BATCHES = 4


def sorted_micro_batches(c: ml_collections.ConfigDict, k: int = SORTED_MICRO_BATCHES) -> None:
  """The protocol's batches, each sorted by length into k micro-batches padded to their own
  longest, and one update from their summed gradient: the batch's update up to float summation
  order (every mixer is pad-invariant; tests/test_batching.py), in fewer tokens. For the
  variable-length tasks; dropout masks differ from fixed padding's, their distribution does not.
  BatchNorm's statistics span the whole batch, so a BatchNorm model keeps it whole."""
  if c.model.norm == "batch":
    return
  c.data.padding = "sorted"
  c.train.grad_accum_steps = k


def latte_code(c: ml_collections.ConfigDict, *, latents: int | None = None,
               learning_rate: float | None = None, embedding: str | None = None) -> None:
  """The Latte authors' code (raresdolga/latte_transformer, HEAD) where it departs from the paper,
  applied after `paper`: weight decay 0.01 for every task (its trainer ignores the configured
  value), and the task's own departures (its config file's L, learning rate, pixel embedding).
  The architecture needs nothing here: where the paper is silent the defaults are the code's."""
  c.train.weight_decay = 0.01
  if latents is not None:
    set_latents(c, latents)
  if learning_rate is not None:
    c.train.learning_rate = learning_rate
  if embedding is not None:
    c.model.embedding = embedding


def lra_model(c: ml_collections.ConfigDict) -> None:
  """The model details of the original LRA code: a final LayerNorm before pooling
  (`encoder_norm`), an MLP classifier head, and the mixer settings it ran."""
  c.model.final_norm = True
  c.model.head = "mlp"
  lra_mixers(c)


def lra_mixers(c: ml_collections.ConfigDict) -> None:
  """The mixer settings the original LRA code ran (a task sets Reformer's chunk, see
  `lra_reformer_chunk`)."""
  c.mixers.performer.kernel = "relu"
  c.mixers.linformer.proj_len = 16
  c.mixers.linformer.share_kv = True
  c.mixers.linformer.share_heads = True
  c.mixers.longformer.num_global = 0
  # One hash into 10 buckets; each chunk looks one chunk back (in sorted order), unnormalised keys,
  # and no bucket mask: a query attends to every key of its chunk window.
  c.mixers.reformer.num_hashes, c.mixers.reformer.num_buckets = 1, 10
  c.mixers.reformer.chunks_after = 0
  c.mixers.reformer.normalize_keys = False
  c.mixers.reformer.attend_across_buckets = True
  # Sinkhorn's sort as the LRA code ran it: `sort_activation='softmax'`, a row softmax of R (no
  # Sinkhorn balancing, temperature 1, no Gumbel noise).
  c.mixers.sinkhorn.iterations, c.mixers.sinkhorn.temperature = 0, 1.0
  c.mixers.sinkhorn.gumbel_noise = False
  # The LRA code's Sparse Transformer opens the CLS token's row and column when it pools by CLS
  # (`use_cls_token`); a preset sets its pooling before this.
  c.mixers.sparse.num_global = int(c.model.pooling == "cls")


def lra_pixel_blocks(c: ml_collections.ConfigDict) -> None:
  """The LRA code's Image and Pathfinder-32 configs' block size for Local Attention and Sinkhorn
  (`cifar10/` and `pathfinder32/{local,sinkhorn}_base.py`: `block_size=64`); the token tasks and
  Path-X (no config of theirs) keep the encoders' default, 50. The Sparse Transformer's blocks are
  50 on every task (its pattern is built in the LRA code's `train_utils.get_model`)."""
  c.mixers.local.block = c.mixers.sinkhorn.block = 64


def lra_reformer_chunk(tokens: int) -> int:
  """The LRA code's Reformer chunk for an encoder input of `tokens` (CLS included): it pads the
  sequence to the next multiple of 10 (always by at least one) and cuts it into
  num_hashes x num_buckets = 10 chunks."""
  return (tokens + 10 - tokens % 10) // 10


def lra_rsqrt(c: ml_collections.ConfigDict, *, num_steps: int, warmup_steps: int) -> None:
  """The original LRA optimizer of ListOps, Text and Retrieval (their base configs): Adam(0.9,
  0.98, 1e-9), weight decay 0.1, lr 0.05 x linear warm-up x rsqrt decay, batch 32, no clipping."""
  c.train.batch_size = 32
  c.train.num_steps = num_steps
  c.train.schedule = "rsqrt"
  c.train.warmup_steps = warmup_steps
  c.train.learning_rate = 0.05
  c.train.weight_decay = 0.1
  c.train.b1, c.train.b2, c.train.eps = 0.9, 0.98, 1e-9
  c.train.grad_clip_norm = 0.0
  lra_model(c)


def lra_cosine(c: ml_collections.ConfigDict, *, batch_size: int, learning_rate: float,
               num_train: int, epochs: int = 200) -> None:
  """The original LRA optimizer of Image, Pathfinder and Path-X: Adam(0.9, 0.98, 1e-9), no weight
  decay, one epoch of linear warm-up then cosine decay, evaluated per epoch, no clipping."""
  steps_per_epoch = num_train // batch_size
  c.train.batch_size = batch_size
  c.train.learning_rate = learning_rate
  c.train.weight_decay = 0.0
  c.train.warmup_steps = steps_per_epoch
  c.train.num_steps = epochs * steps_per_epoch
  c.train.b1, c.train.b2, c.train.eps = 0.9, 0.98, 1e-9
  c.train.grad_clip_norm = 0.0
  every_epoch(c, steps_per_epoch)
  lra_model(c)


def smoke(c: ml_collections.ConfigDict) -> None:
  """Two steps of a one-layer model on whatever is prepared (tests prepare a tiny copy)."""
  c.model.num_layers, c.model.dim, c.model.num_heads, c.model.mlp_dim = 1, 16, 2, 32
  c.model.dropout = 0.0
  set_latents(c, 8)
  c.train.batch_size = 2
  c.train.num_steps = 2
  c.train.log_every_steps = 1
  c.eval.batch_size = 2
  c.eval.every_steps = 2
  c.checkpoint.every_steps = 2


def small_generated(c: ml_collections.ConfigDict, *, smoke_size: bool,
                    generator: dict) -> None:
  """The smoke (seconds) or demo (minutes) preset of a task whose data the suite generates.

  Small models on short generated sequences: few latents, features, projections and packed rows.
  A task sets its own steps, sizes, windows and learning rate where they differ.
  """
  c.data.cache_name = f"{c.task}_{'smoke' if smoke_size else 'demo'}"
  c.data.generate = True
  c.data.generator = ml_collections.ConfigDict(generator)
  c.model.num_layers, c.model.dim, c.model.num_heads, c.model.mlp_dim = (
      (1, 32, 2, 64) if smoke_size else (4, 64, 4, 128))
  c.model.dropout = 0.0
  set_latents(c, 8 if smoke_size else 16)
  c.mixers.performer.num_features = 32 if smoke_size else 64
  c.mixers.linformer.proj_len = 16 if smoke_size else 32
  c.mixers.luna.packed_len = 8 if smoke_size else 16
  c.mixers.s5.state_size, c.mixers.s5.blocks = (16, 2) if smoke_size else (64, 4)
  c.train.batch_size = 16 if smoke_size else 32
  c.train.num_steps = 6 if smoke_size else 4000
  c.train.learning_rate = 3e-3 if smoke_size else 2e-3
  c.train.weight_decay = 0.01
  c.train.warmup_steps = 0 if smoke_size else 100
  c.train.log_every_steps = 2 if smoke_size else 100
  c.eval.every_steps = 3 if smoke_size else 500
  c.eval.batch_size = 32 if smoke_size else 250
  c.checkpoint.every_steps = 3 if smoke_size else 1000
