"""Mixer registry: `MIXERS[name]` is the Linen module class in models/mixers/<name>.py.

Every mixer is built as `cls(dim=, num_heads=, max_len=, **config.mixers.<name>)`
and called as `mixer(x[B,T,D], mask[B,T], deterministic=..., carry=...) -> (y[B,T,D], carry)`.
"""
from __future__ import annotations

import flax.linen as nn

from lra.models.mixers import (latte, latte_macchiato, latte_rglru, latte_rglru_swa, linear, linformer,
                           luna, performer, softmax)

MIXERS: dict[str, type[nn.Module]] = {
    "softmax": softmax.SoftmaxMixer,
    "latte": latte.LatteMixer,
    "latte_macchiato": latte_macchiato.LatteMacchiatoMixer,
    "latte_rglru": latte_rglru.LatteRGLRUMixer,
    "latte_rglru_swa": latte_rglru_swa.LatteRGLRUSWAMixer,
    "linear": linear.LinearMixer,
    "performer": performer.PerformerMixer,
    "linformer": linformer.LinformerMixer,
    "luna": luna.LunaMixer,
}


def get_mixer(name: str) -> type[nn.Module]:
  """The registered mixer class, or an error listing the valid names."""
  try:
    return MIXERS[name]
  except KeyError:
    raise KeyError(f"Unknown mixer '{name}'. Valid mixers: {', '.join(sorted(MIXERS))}") from None


def describe(name: str) -> str:
  """One line for `lra list`: the first line of the class docstring."""
  return (get_mixer(name).__doc__ or "").strip().splitlines()[0]
