r"""Is a Pathfinder set learnable? Trains a CNN on Pathfinder images and reports test accuracy.

  lra data generate pathfinder --out DIR --num-images 200000 --workers 2
  lra data prepare pathfinder --source DIR --cache-name pf_hard
  python tools/pathfinder_probe.py --cache ~/.cache/lra/pf_hard --steps 12000 --out probe.json
  # ResNet-18 for as many steps as fit in an hour; the same command again resumes it:
  python tools/pathfinder_probe.py --cache ~/.cache/lra/pf_hard --model resnet18 \
      --time-budget-s 3600 --out OUT
  python tools/pathfinder_probe.py --model resnet18 --quick --out OUT   # seconds, any CPU

A generator bug (labels that do not match the pictures, markers that give the label away) shows
up here quickly: accuracy stuck at 50% means nothing is learnable; accuracy at the marker-distance
threshold of the generator's stats.json means only the leak is. The CNN sees the image (not a
token sequence), with the 8 symmetries of the square as augmentation (the label is invariant to
them). `--model dilated` (the default) halves the resolution once, then grows its receptive field
with dilated residual convolutions until it spans the image, so it can follow a whole contour;
`--model recurrent` applies one residual convolution many times instead (a learned flood fill);
`--model plain` is the earlier six-layer CNN; `--model resnet18` is the network LRA users report
at 80%+ on Pathfinder-32 hard with 160k training images (a 3x3 stem, no early pooling,
BasicBlocks [2, 2, 2, 2] with BatchNorm, global average pooling). Prints one JSON line per
evaluation (step, images seen, epochs, train loss, test accuracy, seconds).

`--out DIR` keeps Orbax checkpoints in DIR/checkpoints and the records in DIR/probe.json
(rewritten at every evaluation, so a killed run leaves its curve so far); the same command
resumes from the latest checkpoint and ends with the weights and curve of a run never stopped
(the batch sampler's state rides in the checkpoint). `--out FILE.json` writes the records only.
`--time-budget-s S` stops training when S seconds from the script's start are spent (keeping
time for an evaluation), checkpoints, writes the JSON and exits 0; without `--steps` it first
times a few steps and one evaluation and sets the cosine schedule to the number of steps that
fits. `--quick` draws a tiny set from the suite's generator in memory and trains a narrow net
for a few steps: a check of the machinery, not of learnability.

Positive control: `--generated DIR --label marker-distance` reads a folder written by
`lra data generate pathfinder` (its scenes/ sidecar holds the marker positions) and replaces the
label by "the markers are farther apart than the median": a probe that learns this sees the
markers and where they are, so a probe stuck at 50% on the real label is stuck on connectivity.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from pathlib import Path

STARTED = time.monotonic()  # --time-budget-s counts from here: imports and compiles included

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from lra.runs.writers import portable  # noqa: E402


class PlainCNN(nn.Module):
  """Convolutions at full resolution, then strided ones: [B, S, S, 1] -> [B, 2] logits."""
  width: int = 16

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    w = self.width
    for channels, stride in ((w, 1), (2 * w, 1), (2 * w, 2), (4 * w, 1), (4 * w, 2), (4 * w, 1)):
      x = nn.relu(nn.Conv(channels, (3, 3), strides=stride)(x))
    x = jnp.concatenate([x.max(axis=(1, 2)), x.mean(axis=(1, 2))], axis=-1)
    return nn.Dense(2)(nn.relu(nn.Dense(4 * w)(x)))


class DilatedCNN(nn.Module):
  """One stride-2 stage, then residual 3x3 convolutions dilated 1, 2, 4, 8 (twice): at 32 px the
  receptive field covers the image several times over. [B, S, S, 1] -> [B, 2] logits."""
  width: int = 16
  dilations: tuple = (1, 2, 4, 8, 1, 2, 4, 8)

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    w = self.width
    x = nn.relu(nn.Conv(w, (3, 3))(x))
    x = nn.Conv(2 * w, (3, 3), strides=2)(x)
    for d in self.dilations:
      # GroupNorm: no batch statistics to carry; the residual keeps early features reachable.
      x = x + nn.Conv(2 * w, (3, 3), kernel_dilation=d)(nn.relu(nn.GroupNorm(8)(x)))
    x = nn.relu(nn.GroupNorm(8)(x))
    x = jnp.concatenate([x.max(axis=(1, 2)), x.mean(axis=(1, 2))], axis=-1)
    return nn.Dense(2)(nn.relu(nn.Dense(4 * w)(x)))


class RecurrentCNN(nn.Module):
  """One stride-2 stage, then one residual 3x3 convolution applied `steps` times with shared
  weights (the input features re-injected each time): a learned flood fill that can carry a
  marker's activation along its contour. [B, S, S, 1] -> [B, 2] logits."""
  width: int = 16
  steps: int = 16

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    w = self.width
    x = nn.relu(nn.Conv(w, (3, 3))(x))
    features = nn.Conv(2 * w, (3, 3), strides=2)(x)
    norm, update = nn.GroupNorm(8), nn.Conv(2 * w, (3, 3))  # one set of weights for all steps
    h = features
    for _ in range(self.steps):
      h = h + update(nn.relu(norm(h + features)))
    h = nn.relu(nn.GroupNorm(8)(h))
    h = jnp.concatenate([h.max(axis=(1, 2)), h.mean(axis=(1, 2))], axis=-1)
    return nn.Dense(2)(nn.relu(nn.Dense(4 * w)(h)))


class BasicBlock(nn.Module):
  """Two 3x3 convolutions with BatchNorm, plus the input (through a 1x1 convolution where the
  width or resolution changes). [B, S, S, C] -> [B, S / stride, S / stride, channels]."""
  channels: int
  stride: int = 1

  @nn.compact
  def __call__(self, x: jax.Array, train: bool) -> jax.Array:
    norm = functools.partial(nn.BatchNorm, use_running_average=not train, momentum=0.9)
    y = nn.relu(norm()(nn.Conv(self.channels, (3, 3), self.stride, use_bias=False)(x)))
    y = norm()(nn.Conv(self.channels, (3, 3), use_bias=False)(y))
    if x.shape != y.shape:
      x = norm()(nn.Conv(self.channels, (1, 1), self.stride, use_bias=False)(x))
    return nn.relu(x + y)


class ResNet18(nn.Module):
  """ResNet-18 for small images: a 3x3 stem and no max-pooling, so the first stage sees a 1-px
  contour at full resolution; stages of two BasicBlocks at widths w, 2w, 4w, 8w (strides 1, 2,
  2, 2), then global average pooling. [B, S, S, 1] -> [B, 2] logits."""
  width: int = 64

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    x = nn.Conv(self.width, (3, 3), use_bias=False)(x)
    x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9)(x))
    for stage in range(4):
      for block in range(2):
        x = BasicBlock(self.width * 2**stage, 2 if stage and not block else 1)(x, train)
    return nn.Dense(2)(x.mean(axis=(1, 2)))


MODELS = {"dilated": DilatedCNN, "recurrent": RecurrentCNN, "plain": PlainCNN,
          "resnet18": ResNet18}
DEFAULT_WIDTH = {"resnet18": 64}  # the others: 16
# --quick: the generator's 32x32 hard images drawn in memory (~2 ms each), a narrow net.
QUICK = dict(num_train=96, num_test=64, steps=12, batch_size=16, eval_every=4, width=8)
EVAL_BATCH = 500


def load(cache: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
  inputs = np.load(cache / f"{split}.inputs.npy", mmap_mode="r")
  side = int(round(inputs.shape[1] ** 0.5))
  images = np.asarray(inputs, dtype=np.float32).reshape(-1, side, side, 1) / 255.0
  return images, np.load(cache / f"{split}.label.npy").astype(np.int32)


def load_generated(folder: Path, label: str) -> tuple[np.ndarray, ...]:
  """Images of a generated curv_* folder (first 80% train, rest test) with the real label or
  `marker-distance` (marker distance > its median; the 8 symmetries keep distances)."""
  from PIL import Image
  from lra.tasks.generators.pathfinder.metadata import read_metadata
  images, labels, distances = [], [], []
  for path in sorted((folder / "metadata").glob("*.npy"), key=lambda p: int(p.stem)):
    markers = np.load(folder / "scenes" / path.name)["markers"]  # [batch, 2, (y, x)]
    distances.extend(np.hypot(*(markers[:, 0] - markers[:, 1]).T))
    for fields in read_metadata(path):
      with Image.open(folder / fields[0] / fields[1]) as image:
        images.append(np.asarray(image.convert("L"), dtype=np.float32) / 255.0)
      labels.append(int(fields[3]))
  x = np.stack(images)[..., None]
  y = np.asarray(labels if label == "real" else np.asarray(distances) > np.median(distances),
                 dtype=np.int32)
  cut = int(0.8 * len(y))
  return x[:cut], y[:cut], x[cut:], y[cut:]


def symmetry(images: np.ndarray, k: int) -> np.ndarray:
  """One of the 8 symmetries of the square (k in 0..7) applied to [B, S, S, 1] images."""
  out = np.rot90(images, k % 4, axes=(1, 2))
  return np.ascontiguousarray(out[:, :, ::-1] if k >= 4 else out)


def quick_data(seed: int) -> tuple[np.ndarray, ...]:
  """QUICK's images of the generator's 32x32 hard setting, drawn in memory, balanced labels."""
  from lra.tasks.generators.pathfinder.params import get_params
  from lra.tasks.generators.pathfinder.render import render
  from lra.tasks.generators.pathfinder.snakes import make_scenes
  rng, params, cut = np.random.default_rng(seed), get_params(32, "hard"), QUICK["num_train"]
  labels = rng.permutation(np.arange(cut + QUICK["num_test"]) % 2).astype(np.int32)
  x = render(params, make_scenes(params, rng, labels)).images[..., None].astype(np.float32) / 255.0
  return x[:cut], labels[:cut], x[cut:], labels[cut:]


def read_data(args: argparse.Namespace) -> tuple[str, tuple[np.ndarray, ...]]:
  """The source's name and its (train images, train labels, test images, test labels)."""
  if args.quick:
    return "quick (generated in memory)", quick_data(args.seed)
  if args.generated:
    return args.generated.name, load_generated(args.generated, args.label)
  if not (args.cache / "train.inputs.npy").is_file():
    raise SystemExit(f"expected a prepared Pathfinder cache (train.inputs.npy) in {args.cache}, "
                     "found none; make one with `lra data prepare pathfinder --source DIR "
                     "--cache-name NAME`")
  return args.cache.name, (*load(args.cache, "train"), *load(args.cache, "test"))


def learning_rate(step: int, steps: int, peak: float) -> float:
  """Linear warm-up over min(500, steps / 10) steps, then cosine decay to 0 at `steps`."""
  warmup = min(500, steps // 10)
  if step < warmup:
    return peak * step / warmup
  return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(steps - warmup, 1)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  source = parser.add_mutually_exclusive_group()
  source.add_argument("--cache", type=Path, help="a prepared pathfinder cache")
  source.add_argument("--generated", type=Path,
                      help="a curv_* folder of `lra data generate pathfinder` (with scenes/)")
  source.add_argument("--quick", action="store_true",
                      help=f"{QUICK['num_train']} + {QUICK['num_test']} images generated in "
                           f"memory, width {QUICK['width']}, {QUICK['steps']} steps: seconds")
  parser.add_argument("--label", choices=("real", "marker-distance"), default="real",
                      help="with --generated: the real label or the positive control")
  parser.add_argument("--model", choices=tuple(MODELS), default="dilated")
  parser.add_argument("--steps", type=int,
                      help="schedule length (default 3000; with --time-budget-s: what fits)")
  parser.add_argument("--time-budget-s", type=float,
                      help="wall time for this invocation; stops, evaluates, saves, exits 0")
  parser.add_argument("--batch-size", type=int, help="default 64")
  parser.add_argument("--learning-rate", type=float, default=1e-3)
  parser.add_argument("--width", type=int, help="base width (default 16; resnet18: 64)")
  parser.add_argument("--eval-every", type=int, help="default 500")
  parser.add_argument("--train-examples", type=int, help="use only the first N training images")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", type=Path,
                      help="a folder (checkpoints, probe.json; a rerun resumes) or a .json file")
  args = parser.parse_args(argv)
  if not (args.cache or args.generated or args.quick):
    parser.error("one of --cache, --generated or --quick is required")
  if args.label != "real" and not args.generated:
    parser.error("--label marker-distance needs --generated (the marker positions are in scenes/)")
  defaults = dict(batch_size=64, eval_every=500, width=DEFAULT_WIDTH.get(args.model, 16))
  if args.quick:
    defaults = {name: QUICK[name] for name in ("batch_size", "eval_every", "width", "steps")}
  for name, value in defaults.items():
    if getattr(args, name) is None:
      setattr(args, name, value)
  if args.steps is None and args.time_budget_s is None:
    args.steps = 3000
  args.argv = sys.argv[1:] if argv is None else list(argv)
  return args


# The schedule's factor is passed to each step, so its length can be set after timing steps.
OPTIMIZER = optax.adamw(1.0, weight_decay=1e-4)


@functools.partial(jax.jit, static_argnums=0)  # eager, a ResNet's init compiles ~100 small ops
def init_state(model: nn.Module, key: jax.Array, sample: jax.Array) -> dict:
  variables = model.init(key, sample)
  return {"variables": variables, "opt_state": OPTIMIZER.init(variables["params"])}


def logits_of(model: nn.Module, variables: dict, x: jax.Array,
              train: bool) -> tuple[jax.Array, dict]:
  """[B, S, S, 1] -> [B, 2] logits, and the new BatchNorm statistics when training with them."""
  if train and "batch_stats" in variables:
    return model.apply(variables, x, train=True, mutable=["batch_stats"])
  return model.apply(variables, x), {}


# The model is a static argument (Flax modules hash by their fields), so runs of one process
# with the same model share one compile.
@functools.partial(jax.jit, static_argnums=0)
def train_step(model: nn.Module, state: dict, x: jax.Array, y: jax.Array,
               lr: jax.Array) -> tuple[dict, jax.Array]:
  variables = state["variables"]

  def loss_fn(params):
    logits, updates = logits_of(model, {**variables, "params": params}, x, train=True)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), updates

  (loss, updates), grads = jax.value_and_grad(loss_fn, has_aux=True)(variables["params"])
  steps, opt_state = OPTIMIZER.update(grads, state["opt_state"], variables["params"])
  params = optax.apply_updates(variables["params"], jax.tree.map(lambda u: lr * u, steps))
  return {"variables": {**variables, **updates, "params": params}, "opt_state": opt_state}, loss


@functools.partial(jax.jit, static_argnums=0)
def count_correct(model: nn.Module, variables: dict, x: jax.Array, y: jax.Array) -> jax.Array:
  return (logits_of(model, variables, x, train=False)[0].argmax(-1) == y).sum()


def accuracy(model: nn.Module, state: dict, x: np.ndarray, y: np.ndarray) -> float:
  hits = sum(int(count_correct(model, state["variables"], x[i:i + EVAL_BATCH],
                               y[i:i + EVAL_BATCH])) for i in range(0, len(y), EVAL_BATCH))
  return hits / len(y)


def seconds_per_step(model: nn.Module, state: dict, x: np.ndarray, y: np.ndarray) -> float:
  """Seconds per train step on one batch, timed after its compile (the results thrown away)."""
  jax.block_until_ready(train_step(model, state, x, y, 0.0))
  began = time.monotonic()
  for _ in range(5):
    jax.block_until_ready(train_step(model, state, x, y, 0.0))
  return (time.monotonic() - began) / 5


def seconds_per_eval(model: nn.Module, state: dict, x: np.ndarray, y: np.ndarray) -> float:
  """Seconds for one evaluation of the test set, timed after its batch shape's compile."""
  count_correct(model, state["variables"], x[:EVAL_BATCH], y[:EVAL_BATCH]).block_until_ready()
  began = time.monotonic()
  accuracy(model, state, x, y)
  return time.monotonic() - began


def settings_of(args: argparse.Namespace, source: str, num_train: int, num_test: int) -> dict:
  """What a resumed run must share with the run it continues."""
  return {"model": args.model, "width": args.width, "batch_size": args.batch_size,
          "learning_rate": args.learning_rate, "eval_every": args.eval_every,
          "seed": args.seed, "label": args.label, "cache": source, "num_train": num_train,
          "num_test": num_test}


def check_same_run(report: Path, settings: dict, steps: int | None) -> None:
  """Exits with one line naming what differs if `report` (probe.json) is of another run."""
  if not report.is_file():
    return
  previous = json.loads(report.read_text())
  differ = [f"{k}: {v} here, {previous.get(k)} there" for k, v in settings.items()
            if previous.get(k) != v]
  if steps is not None and steps != previous["steps"]:
    differ.append(f"steps: {steps} here, {previous['steps']} there")
  if differ:
    raise SystemExit(f"{report.parent} holds a probe run with other settings "
                     f"({'; '.join(differ)}); give the same settings to resume it, or another "
                     "--out for a new run")


def plan_steps(model: nn.Module, state: dict, x: np.ndarray, y: np.ndarray, end: float,
               eval_seconds_per_step: float) -> int:
  """The schedule length whose steps and evaluations end by `end` (time.monotonic())."""
  step_seconds = seconds_per_step(model, state, x, y)
  steps = max(1, int((end - time.monotonic()) / (step_seconds + eval_seconds_per_step)))
  print(json.dumps({"planned_steps": steps, "step_seconds": round(step_seconds, 4)}), flush=True)
  return steps


def write_json(path: Path, report: dict) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  partial = path.with_name(path.name + ".tmp")
  partial.write_text(json.dumps(report, indent=2) + "\n")
  partial.replace(path)  # a reader never sees half a file


def train(args: argparse.Namespace) -> tuple[dict, dict]:
  """Trains the probe, or resumes it from --out; returns its report (the JSON) and final state.

  Resume order: the settings in --out's probe.json must match the command's (an error says which
  differ); then the latest checkpoint's step, model and optimizer state, batch sampler state,
  curve and schedule length.
  """
  source, (train_x, train_y, test_x, test_y) = read_data(args)
  if args.train_examples:
    train_x, train_y = train_x[:args.train_examples], train_y[:args.train_examples]
  deadline = None if args.time_budget_s is None else STARTED + args.time_budget_s
  settings = settings_of(args, source, len(train_y), len(test_y))
  folder = args.out if args.out and args.out.suffix != ".json" else None
  json_path = (folder / "probe.json") if folder else args.out
  if folder:
    check_same_run(folder / "probe.json", settings, args.steps)
  model = MODELS[args.model](args.width)
  initial = init_state(model, jax.random.PRNGKey(args.seed), train_x[:1])
  rng = np.random.default_rng(args.seed)
  book = {"settings": settings, "steps": args.steps, "curve": [], "losses": [], "seconds": 0.0,
          "resumed_at": []}
  state, step, checkpoints = initial, 0, None
  if folder:
    from lra.runs.checkpoints import Checkpointer
    checkpoints = Checkpointer(folder)
    step = checkpoints.latest_step() or 0
  if step:
    state, book = checkpoints.restore(step, initial)
    rng.bit_generator.state = book["rng"]
    book["resumed_at"].append(step)
  reserve = 0.0
  if deadline is not None:
    eval_seconds = seconds_per_eval(model, initial, test_x, test_y)
    reserve = eval_seconds + max(2.0, 0.02 * args.time_budget_s)  # the last evaluation and save
    if book["steps"] is None:
      book["steps"] = plan_steps(model, initial, train_x[:args.batch_size],
                                 train_y[:args.batch_size], deadline - reserve,
                                 eval_seconds / args.eval_every)
  steps = book["steps"]

  def report(status: str, stopped_at: dict | None = None) -> dict:
    out = {"command": " ".join(["python tools/pathfinder_probe.py", *map(portable, args.argv)]),
           **settings, "steps": steps, "epochs": round(steps * args.batch_size / len(train_y), 2),
           "status": status, "device": jax.devices()[0].device_kind,
           "time_budget_s": args.time_budget_s, "resumed_at": book["resumed_at"],
           "curve": book["curve"]}
    if stopped_at:
      out["stopped_at"] = stopped_at
    if json_path:
      write_json(json_path, out)
    return out

  def record() -> dict:
    losses = [float(loss) for loss in window]
    return {"step": step, "images_seen": step * args.batch_size,
            "epochs": round(step * args.batch_size / len(train_y), 3),
            "train_loss": round(float(np.mean(losses)), 4) if losses else None,
            "test_accuracy": round(accuracy(model, state, test_x, test_y), 4),
            "seconds": round(book["seconds"] + time.monotonic() - began, 1)}

  def save() -> None:
    if checkpoints:
      checkpoints.save(step, state, {**book, "rng": rng.bit_generator.state,
                                     "losses": [float(loss) for loss in window],
                                     "seconds": book["seconds"] + time.monotonic() - began})

  began, window, status, stopped_at = time.monotonic(), list(book["losses"]), "complete", None
  report("running" if step < steps else "complete")
  try:
    while step < steps:
      index = rng.integers(0, len(train_y), args.batch_size)
      images = symmetry(train_x[index], int(rng.integers(0, 8)))
      lr = learning_rate(step, steps, args.learning_rate)
      if deadline is not None and window:
        jax.block_until_ready(window[-1])  # one step in flight at most: the clock stays honest
      state, loss = train_step(model, state, images, train_y[index], lr)
      step += 1
      window.append(loss)
      if step % args.eval_every == 0 or step == steps:
        book["curve"].append(record())
        window = []
        print(json.dumps(book["curve"][-1]), flush=True)
        save()
        report("running" if step < steps else "complete")
      if deadline is not None and step < steps and time.monotonic() + reserve >= deadline:
        status = "stopped"
        if step % args.eval_every:
          stopped_at = record()
          print(json.dumps({"stopped_at": stopped_at}), flush=True)
        save()
        break
  finally:
    if checkpoints:
      checkpoints.close()
  if status == "stopped":
    print(f"stopped by the time budget at step {step} of {steps}"
          + ("; the same command resumes from here" if folder else ""), file=sys.stderr)
  return report(status, stopped_at), state


def main() -> None:
  train(parse_args())


if __name__ == "__main__":
  main()
