"""Why S5 in the common block cannot fit the Pathfinder squares screen: measurements at init.

Issue 58's evidence, on the fitting screen (lra.bench.fit_screen: `--preset squares`, 480 easy
images as 4x4 squares, 64 tokens, 600 steps); written to results/s5_diagnosis/, read in
  docs/mixers.md: 1. per block, the RMS of the residual stream, of the mixer's output and of its
     two parts (the scans' 2 Re(C x) and the feed-through D u);
  2. the gradient norm of every S5 parameter (Lambda, B, C, D, log_step) against the rest;
  3. the discretisation: each mode's memory (steps until |Lambda_bar|^k < 1/2) and rotation per
     step, against 64 and 256 tokens;
  4. one S5 layer beside the official one (lindermanlab/S5 `SequenceLayer` around `S5SSM`, loaded
     from a local clone given by --official, never vendored) on the same input and parameters;
  5. the fitting screen under each change those point at (--screens).

  python tools/s5_diagnosis.py [--official PATH_TO_S5_CLONE] [--screens] [--out DIR]
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import sys
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from lra.runs.config_loading import default_data_dir, resolve_config
from lra.models.build import build_model
from lra.models.encoder import EncoderBlock
from lra.models.mixers import s5 as s5_mixer
from lra.models.mixers import s5_init
from lra.runs.config_loading import load_data

ROOT = Path(__file__).resolve().parent.parent
SCREEN = ("data.generator.num_images=600",)  # 600 images of the squares generator: 480 train
S5_PARAMS = ("Lambda_re", "Lambda_im", "B", "C1", "C2", "D", "log_step")


def _rms(x) -> float:
  return float(jnp.sqrt(jnp.mean(jnp.square(x.astype(jnp.float32)))))


def _batch(data, n: int) -> dict:
  split = data.split("train")
  return {"inputs": np.asarray(split["inputs"][:n]), "mask": np.ones((n, split["inputs"].shape[1]),
                                                                      bool),
          "label": np.asarray(split["label"][:n])}


def scales_and_grads(mixer: str, overrides: tuple[str, ...], batch_size: int = 32) -> dict:
  """Per-block RMS of the residual stream and of the mixer's output, and gradient norms."""
  config = resolve_config("pathfinder", mixer, "squares", (*SCREEN, *overrides))
  data = load_data(config, default_data_dir())
  model = build_model(config, data.spec)
  batch = _batch(data, batch_size)
  variables = model.init(jax.random.PRNGKey(config.train.seed), batch, deterministic=True)
  # Every block's output (the residual stream) and every mixer's output, as Flax returns them.
  _, state = model.apply(variables, batch, deterministic=True, capture_intermediates=lambda m, _:
                         isinstance(m, (EncoderBlock, s5_mixer.S5Mixer)) or
                         type(m).__name__.endswith("Mixer") or m.name == "mixer")
  inter = state["intermediates"]["encoder"]
  blocks = sorted(k for k in inter if k.startswith("blocks") or k.startswith("block"))
  per_block = []
  for name in blocks:
    out, _ = inter[name]["__call__"][0]
    mix, _ = inter[name]["mixer"]["__call__"][0]
    per_block.append({"block": name, "residual_out_rms": _rms(out), "mixer_out_rms": _rms(mix)})
  if mixer == "s5":
    # The mixer's two parts on its own input (the normed stream), recomputed from its parameters.
    for entry, name in zip(per_block, blocks):
      p = variables["params"]["encoder"][name]["mixer"]
      h = _block_input_norm(model, variables, batch, name)
      entry.update(_s5_parts(p, h, config))
  grads = _grad_norms(model, variables, batch)
  return {"mixer": mixer, "overrides": list(overrides), "blocks": per_block, "grad_norms": grads}


def _block_input_norm(model, variables, batch, name):
  """The normed input the block's mixer reads (its `mixer_norm` output)."""
  _, state = model.apply(variables, batch, deterministic=True,
                         capture_intermediates=lambda m, _: m.name == "mixer_norm")
  return state["intermediates"]["encoder"][name]["mixer_norm"]["__call__"][0]


def _s5_parts(p: dict, h, config) -> dict:
  s5 = config.mixers.s5
  lam = p["Lambda_re"] + 1j * p["Lambda_im"]
  step = jnp.exp(p["log_step"])
  lam_bar, b_bar = s5_mixer.discretise_zoh(lam, s5_mixer._complex(p["B"]), step)
  mask = jnp.ones(h.shape[:2], bool)
  scans = s5_mixer.s5_ssm(h, mask, lam_bar, b_bar, s5_mixer._complex(p["C1"]),
                          s5_mixer._complex(p["C2"]))
  # The part every image shares (the mean over the batch at each position and channel): the
  # background's constant squares, summed by the scans over up to 1/(|Re Lambda| dt) tokens.
  shared = lambda y: _rms(jnp.broadcast_to(jnp.mean(y, axis=0, keepdims=True), y.shape))  # noqa
  return {"scans_rms": _rms(scans), "scans_shared_rms": shared(scans),
          "feedthrough_rms": _rms(p["D"][None, None] * h), "mixer_in_rms": _rms(h),
          "mixer_in_shared_rms": shared(h), "state_size": s5.state_size}


def _grad_norms(model, variables, batch) -> dict:
  def loss(params):
    logits = model.apply({**variables, "params": params}, batch, deterministic=True)
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()
  grads = jax.grad(loss)(variables["params"])
  norms: dict[str, float] = {}
  for path, g in jax.tree_util.tree_leaves_with_path(grads):
    keys = [getattr(k, "key", str(k)) for k in path]
    group = keys[-1] if keys[-1] in S5_PARAMS and "mixer" in keys else (
        "mixer (other)" if "mixer" in keys else "rest of the model")
    norms[group] = norms.get(group, 0.0) + float(jnp.sum(jnp.square(g)))
  return {k: v ** 0.5 for k, v in sorted(norms.items())}


def discretisation(state_size: int = 256, blocks: int = 8, dt_min: float = 1e-3,
                   dt_max: float = 0.1, seed: int = 0) -> dict:
  """Each mode's memory and rotation per step at initialisation, against 64 and 256 tokens."""
  lam, _, _ = s5_init.block_diagonal_init(state_size, blocks)
  rng = np.random.default_rng(seed)
  step = np.exp(rng.uniform(np.log(dt_min), np.log(dt_max), lam.shape))
  decay = np.abs(np.exp(lam * step))                       # |Lambda_bar| per step
  half_life = np.log(0.5) / np.log(decay)                   # steps until the state halves
  rotation = np.abs(lam.imag) * step                        # radians per step
  out = {"modes": int(lam.size), "lambda_re": float(lam.real[0]),
         "abs_lambda_im_range": [float(np.abs(lam.imag).min()), float(np.abs(lam.imag).max())],
         "half_life_steps_quantiles": [float(q) for q in np.quantile(half_life, [0, .25, .5, .75,
                                                                                 1])],
         "b_bar_gain_quantiles": [float(q) for q in np.quantile(
             np.abs((np.exp(lam * step) - 1) / lam), [0, .5, 1])]}
  for tokens in (64, 256, 1024):
    out[f"modes_remembering_all_{tokens}_tokens"] = float(np.mean(half_life > tokens))
    out[f"modes_turning_under_a_radian_over_{tokens}_tokens"] = float(np.mean(rotation * tokens
                                                                              < 1))
  return out


def _load_official(clone: Path) -> types.ModuleType:
  """lindermanlab/S5's `s5` package from a local clone (its annotations name
  jax.numpy.DeviceArray, gone from today's JAX: given a stand-in before import)."""
  if not hasattr(jnp, "DeviceArray"):
    jnp.DeviceArray = jax.Array
  sys.path.insert(0, str(clone))
  spec = importlib.util.spec_from_file_location("s5", clone / "s5" / "__init__.py",
                                                submodule_search_locations=[str(clone / "s5")])
  package = importlib.util.module_from_spec(spec)
  sys.modules["s5"] = package
  for name in ("ssm_init", "ssm", "layers"):
    sub = importlib.util.spec_from_file_location(f"s5.{name}", clone / "s5" / f"{name}.py")
    module = importlib.util.module_from_spec(sub)
    sys.modules[f"s5.{name}"] = module
    sub.loader.exec_module(module)
    setattr(package, name, module)
  return package


def compare_with_official(clone: Path, gate: str = "half_glu1", dim: int = 16, length: int = 64,
                          state_size: int = 16, blocks: int = 2) -> dict:
  """Our block="s5" layer and the official SequenceLayer(S5SSM), same input, same parameters."""
  official = _load_official(clone)
  factory = functools.partial(s5_mixer.S5Mixer, state_size=state_size, blocks=blocks)
  ours = EncoderBlock(mixer_factory=factory, num_heads=1, mlp_dim=0, dropout_rate=0.0,
                      max_len=length, block="s5", s5_gate=gate)
  x = jax.random.normal(jax.random.PRNGKey(1), (2, length, dim))
  mask = jnp.ones((2, length), bool)
  params = ours.init(jax.random.PRNGKey(0), x, mask, None, True)["params"]
  lam, v, v_inv = s5_init.block_diagonal_init(state_size, blocks)
  ssm = official.ssm.init_S5SSM(H=dim, P=state_size // 2, Lambda_re_init=lam.real,
                                Lambda_im_init=lam.imag, V=v, Vinv=v_inv,
                                C_init="trunc_standard_normal", discretization="zoh",
                                dt_min=1e-3, dt_max=0.1, conj_sym=True, clip_eigs=False,
                                bidirectional=True)
  layer = official.layers.SequenceLayer(ssm=ssm, dropout=0.0, d_model=dim, activation=gate,
                                        training=False, prenorm=True, batchnorm=False)
  theirs_init = layer.init(jax.random.PRNGKey(0), x[0])["params"]
  m = params["mixer"]
  theirs = {"seq": {"Lambda_re": m["Lambda_re"], "Lambda_im": m["Lambda_im"], "B": m["B"],
                    "C1": m["C1"], "C2": m["C2"], "D": m["D"],
                    "log_step": m["log_step"][:, None]},
            "out2": params["gate"], "norm": params["mixer_norm"]}
  shapes_agree = jax.tree.map(lambda a, b: a.shape == b.shape, theirs_init, theirs)
  ours_y, _ = ours.apply({"params": params}, x, mask, None, True)
  theirs_y = jax.vmap(lambda seq: layer.apply({"params": theirs}, seq))(x)
  return {"gate": gate, "shapes_agree": all(jax.tree.leaves(shapes_agree)),
          "max_abs_difference": float(jnp.max(jnp.abs(ours_y - theirs_y))),
          "output_rms": _rms(ours_y)}


# The fitting screen (lra.bench.fit_screen: 480 easy images as 4x4 squares, 600 steps) for S5 and
# Latte under each change the measurements above point at: the output layer, positions, S5's own
# learning rates, the norm (BatchNorm, as S5's LRA scripts run it), S5's own block, and S5 whose
# input has each sequence's mean removed (tools/s5_probe_centred.py).
SCREENS = (
    ("s5", "bare SSM (runs before 2026-11-28)", ("mixers.s5.activation=none",)),
    ("s5", "S5's output layer (GELU, half_glu1 gate)", ()),
    ("s5", "S5's output layer, sinusoidal positions", ("model.pos_encoding=sinusoidal",)),
    ("s5", "S5's output layer, S5's rates (4.5e-3, SSM 9e-4)",
     ("train.learning_rate=0.0045", "train.ssm_learning_rate=0.0009")),
    ("s5", "bare SSM, dt in [0.01, 1]", ("mixers.s5.activation=none", "mixers.s5.dt_min=0.01",
                                        "mixers.s5.dt_max=1.0")),
    ("s5", "S5's own block (no MLP), LayerNorm", ("model.block=s5", "mixers.s5.activation=none")),
    ("s5", "bare SSM, BatchNorm", ("mixers.s5.activation=none", "model.norm=batch")),
    ("s5", "S5's output layer, BatchNorm", ("model.norm=batch",)),
    ("tools/s5_probe_centred.py:CentredS5", "bare SSM (the class default) on its input less each "
     "sequence's mean", ("model.pos_encoding=none",)),
    ("latte", "Latte", ()),
    ("latte", "Latte, BatchNorm", ("model.norm=batch",)),
)


def screens() -> list[dict]:
  from lra.bench import fit_screen
  found = []
  for mixer, what, overrides in SCREENS:
    fit = fit_screen.screen(mixer, overrides=overrides)
    found.append({"mixer": mixer, "what": what, "overrides": list(overrides),
                  "train_accuracy": fit.train_accuracy, "train_loss": fit.train_loss,
                  "steps_per_s": fit.steps_per_s})
    print(f"{what:60} {fit.train_accuracy:6.1%}  loss {fit.train_loss:.3f}", flush=True)
  return found


DOCS = ROOT / "docs" / "mixers.md"
MARKERS = ("<!-- s5-screens:start -->", "<!-- s5-screens:end -->")


def screens_block(records: list[dict]) -> str:
  """docs/mixers.md's table of the screens, from screens.json: every figure the page gives of
  them, so none is typed there."""
  from lra.bench import fit_screen
  lines = [MARKERS[0], "<!-- Generated by `python tools/s5_diagnosis.py --docs` from "
           "results/s5_diagnosis/screens.json; do not edit between these markers. -->", "",
           f"| block ({fit_screen.TRAIN_IMAGES} images, {fit_screen.STEPS} steps) | settings | "
           f"train accuracy, last {fit_screen.LAST_STEPS} steps | train loss |",
           "|---|---|---:|---:|"]
  for r in records:
    settings = ", ".join(f"`{o}`" for o in r["overrides"]) or "the preset's"
    lines.append(f"| {r['mixer'].split(':')[-1]}: {r['what']} | {settings} | "
                 f"{100 * r['train_accuracy']:.1f}% | {r['train_loss']:.3f} |")
  return "\n".join([*lines, "", MARKERS[1]])


def docs_text(records: list[dict]) -> str:
  """docs/mixers.md with its screens block made from `records`."""
  from lra.report.tables import splice_readme
  return splice_readme(DOCS.read_text(), screens_block(records), DOCS, MARKERS,
                       "python tools/s5_diagnosis.py --docs")


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--official", type=Path, help="a clone of lindermanlab/S5 (optional)")
  parser.add_argument("--out", type=Path, default=ROOT / "results" / "s5_diagnosis")
  parser.add_argument("--screens", action="store_true", help="also the fitting screens (minutes "
                      "each; written to screens.json)")
  parser.add_argument("--docs", action="store_true", help="only write docs/mixers.md's table of "
                      "the screens from screens.json")
  args = parser.parse_args(argv)
  if args.docs:
    DOCS.write_text(docs_text(json.loads((args.out / "screens.json").read_text())))
    print(f"wrote {DOCS}")
    return 0
  if args.screens:
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "screens.json").write_text(json.dumps(screens(), indent=1) + "\n")
  jax.config.update("jax_default_matmul_precision", "highest")
  report = {"screen": list(SCREEN),
            "init": [scales_and_grads("s5", ("mixers.s5.activation=none",)),
                     scales_and_grads("latte", ()),
                     scales_and_grads("s5", ("mixers.s5.activation=half_glu1",))],
            "discretisation": discretisation()}
  if args.official:
    report["official"] = [compare_with_official(args.official, gate)
                          for gate in ("half_glu1", "half_glu2")]
  args.out.mkdir(parents=True, exist_ok=True)
  (args.out / "init.json").write_text(json.dumps(report, indent=1) + "\n")
  print(json.dumps(report, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main())
