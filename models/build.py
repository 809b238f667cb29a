"""From a config and a task's spec to the classifier: the one place a mixer name becomes a module.

The runner (train, eval, bench) builds every model here, so the same config always means the same
network. A spec is anything with vocab_size, seq_len, num_classes and dual (tasks' TaskSpec);
models never import tasks.
"""
from __future__ import annotations

import functools
from typing import Any

import ml_collections

from lra import errors
from lra.models import mixers
from lra.models.denoiser import Denoiser
from lra.models.encoder import Classifier, Encoder, MixerFactory
from lra.models.mixers import find_mixer, get_mixer

DTYPES = ("float32", "bfloat16")


def mixer_factory(config: ml_collections.ConfigDict) -> MixerFactory:
  """The class of `config.model.mixer` with its block `config.mixers.<mixer>` bound.

  A mixer from outside the suite is found again from `config.mixer_source.spec`; its file must
  still be the one the config recorded (sha256), or the config would not say what runs.
  """
  name, source = config.model.mixer, config.get("mixer_source")
  if not source:
    return functools.partial(get_mixer(name), **config.mixers[name].to_dict())
  found = find_mixer(source.spec)
  if found.key != name:
    raise errors.BadValue(f"model.mixer is '{name}' but mixer_source is {source.spec}; pass the "
                          "mixer as MIXER (lra run TASK MIXER) rather than --config.model.mixer.")
  if found.source["sha256"] != source.sha256:
    raise errors.BadValue(f"{source.spec} changed since this config was made (sha256 "
                          f"{source.sha256[:8]}, now {found.source['sha256'][:8]}): restore the "
                          "file to use this config, or start a new run (`lra run TASK "
                          f"{source.spec}` without --run-dir and --config.mixer_source.*; "
                          "`lra status` prints it whole).")
  return functools.partial(found.cls, **config.mixers[name].to_dict())


OBJECTIVES = ("classify", "denoise")


def build_model(config: ml_collections.ConfigDict, spec: Any) -> Classifier | Denoiser:
  """The model of this config's objective for this task's spec: sizes from `config.model`,
  shapes from the task.

  Args:
    config: a resolved task config (its `model` block and the chosen mixer's block are read;
      `objective`, "classify" or "denoise" (self-pretraining, then the `spt` block too)).
    spec: vocab_size, seq_len (T), num_classes (C), dual (two sequences per example).
  Returns:
    A Classifier called as `model.apply(variables, batch, deterministic=...) -> logits [B,C]`,
    or for "denoise" the Denoiser around the same encoder (models/denoiser.py).
  """
  encoder = build_encoder(config, spec)
  objective = config.get("objective", "classify")  # configs written before SPT classify
  if objective == "denoise":
    # Pixel tasks bin their 0-255 values; token tasks predict the vocabulary's ids.
    return Denoiser(encoder=encoder, mask_ratio=config.spt.mask_ratio, loss=config.spt.loss,
                    num_values=spec.vocab_size, dual=spec.dual,
                    pixel_levels=config.spt.pixel_levels if spec.pixels else None)
  if objective != "classify":
    raise errors.BadValue(f"objective must be one of {OBJECTIVES}, got {objective!r}")
  return Classifier(encoder=encoder, num_classes=spec.num_classes, dual=spec.dual,
                    head=config.model.head)


def build_encoder(config: ml_collections.ConfigDict, spec: Any) -> Encoder:
  """The encoder every objective shares, from `config.model` and the task's vocabulary and T."""
  m = config.model
  if m.dtype not in DTYPES:
    raise errors.BadValue(f"model.dtype must be one of {DTYPES}, got {m.dtype!r}")
  if m.block == "s5" and config.mixers[m.mixer].get("activation", "none") != "none":
    # S5's published block gates the SSM's output itself; a mixer that gates too would be gated
    # twice (the common block's S5 carries S5's output layer, the published block does not).
    raise errors.BadValue("model.block=s5 applies S5's output layer (model.s5_gate) itself, so "
                          "the mixer's own must be off: add "
                          f"--config.mixers.{m.mixer}.activation=none.")
  return Encoder(vocab_size=spec.vocab_size, max_len=spec.seq_len, dim=m.dim,
                 num_layers=m.num_layers, num_heads=m.num_heads, mlp_dim=m.mlp_dim,
                 dropout_rate=m.dropout, mixer_factory=mixer_factory(config),
                 embedding=m.embedding, pos_encoding=m.pos_encoding, pooling=m.pooling,
                 dtype=m.dtype, remat=m.remat, block=m.block, glu=m.glu,
                 mixer_gate=m.mixer_gate, mlp_hidden_dropout=m.mlp_hidden_dropout,
                 final_norm=m.final_norm, s5_gate=m.s5_gate,
                 # .get: a run's config.json from before these keys existed still builds.
                 norm=m.get("norm", "block"), bn_momentum=m.get("bn_momentum", 0.95),
                 s5_dropout=m.get("s5_dropout", "elementwise"),
                 patch=m.get("patch", 1))


def tokens_seen(config: ml_collections.ConfigDict, seq_len: int) -> int:
  """The tokens the encoder reads from a task's T: T, or T / p^2 with `model.patch=p` (each p x p
  square of pixels one token; Pathfinder's `squares`: 1,024 pixels -> 64 tokens)."""
  return seq_len // config.model.get("patch", 1) ** 2


def input_words(config: ml_collections.ConfigDict, seq_len: int) -> str:
  """"2000 tokens", or "64 tokens (4x4 squares of 1024 pixels)": what a run's header, its dry
  run and the tables say the model reads."""
  tokens, patch = tokens_seen(config, seq_len), config.model.get("patch", 1)
  return f"{tokens} tokens" + (f" ({patch}x{patch} squares of {seq_len} pixels)"
                               if patch > 1 else "")


def execution_path(config: ml_collections.ConfigDict) -> str:
  """How this config's mixer computes on this process's backend (`mixers.execution_path`): e.g.
  "cudnn" or "einsum (query chunks of 128)" for softmax, "" for a mixer with one way."""
  m = config.model
  return mixers.execution_path(m.mixer, config.mixers[m.mixer].to_dict(), m.dtype,
                               head_dim=m.dim // m.num_heads)
