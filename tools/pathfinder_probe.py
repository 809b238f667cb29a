"""Is a Pathfinder set learnable? Trains a small CNN on a prepared cache and reports test accuracy.

  lra data generate pathfinder --out DIR --num-images 200000 --workers 2
  lra data prepare pathfinder --source DIR --cache-name pf_hard
  python tools/pathfinder_probe.py --cache ~/.cache/lra/pf_hard --steps 12000 --out probe.json

A generator bug (labels that do not match the pictures, markers that give the label away) shows
up here quickly: accuracy stuck at 50% means nothing is learnable; accuracy at the marker-distance
threshold of the generator's stats.json means only the leak is. The CNN sees the image (not a
token sequence), with the 8 symmetries of the square as augmentation (the label is invariant to
them). `--model dilated` (the default) halves the resolution once, then grows its receptive field
with dilated residual convolutions until it spans the image, so it can follow a whole contour;
`--model recurrent` applies one residual convolution many times instead (a learned flood fill);
`--model plain` is the earlier six-layer CNN. Prints one JSON line per evaluation (step, images
seen, test accuracy, seconds) and writes them all to --out when given.

Positive control: `--generated DIR --label marker-distance` reads a folder written by
`lra data generate pathfinder` (its scenes/ sidecar holds the marker positions) and replaces the
label by "the markers are farther apart than the median": a probe that learns this sees the
markers and where they are, so a probe stuck at 50% on the real label is stuck on connectivity.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax


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


MODELS = {"dilated": DilatedCNN, "recurrent": RecurrentCNN, "plain": PlainCNN}


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


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  source = parser.add_mutually_exclusive_group(required=True)
  source.add_argument("--cache", type=Path, help="a prepared pathfinder cache")
  source.add_argument("--generated", type=Path,
                      help="a curv_* folder of `lra data generate pathfinder` (with scenes/)")
  parser.add_argument("--label", choices=("real", "marker-distance"), default="real",
                      help="with --generated: the real label or the positive control")
  parser.add_argument("--model", choices=tuple(MODELS), default="dilated")
  parser.add_argument("--steps", type=int, default=3000)
  parser.add_argument("--batch-size", type=int, default=64)
  parser.add_argument("--learning-rate", type=float, default=1e-3)
  parser.add_argument("--width", type=int, default=16)
  parser.add_argument("--eval-every", type=int, default=500)
  parser.add_argument("--train-examples", type=int, help="use only the first N training images")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", type=Path, help="write the evaluation records here (JSON)")
  args = parser.parse_args()

  if args.cache and args.label != "real":
    parser.error("--label marker-distance needs --generated (the marker positions are in scenes/)")
  if args.cache:
    (train_x, train_y), (test_x, test_y) = load(args.cache, "train"), load(args.cache, "test")
  else:
    train_x, train_y, test_x, test_y = load_generated(args.generated, args.label)
  if args.train_examples:
    train_x, train_y = train_x[:args.train_examples], train_y[:args.train_examples]
  model = MODELS[args.model](args.width)
  params = model.init(jax.random.PRNGKey(args.seed), train_x[:1])
  optimizer = optax.adamw(optax.warmup_cosine_decay_schedule(
      0.0, args.learning_rate, min(500, args.steps // 10), args.steps), weight_decay=1e-4)
  opt_state = optimizer.init(params)

  @jax.jit
  def train_step(params, opt_state, x, y):
    def loss_fn(p):
      return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, x), y).mean()
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  @jax.jit
  def correct(params, x, y):
    return (model.apply(params, x).argmax(-1) == y).sum()

  def test_accuracy() -> float:
    hits = sum(int(correct(params, test_x[i:i + 500], test_y[i:i + 500]))
               for i in range(0, len(test_y), 500))
    return hits / len(test_y)

  rng = np.random.default_rng(args.seed)
  start, records, losses = time.perf_counter(), [], []
  for step in range(1, args.steps + 1):
    index = rng.integers(0, len(train_y), args.batch_size)
    images = symmetry(train_x[index], int(rng.integers(0, 8)))
    params, opt_state, loss = train_step(params, opt_state, images, train_y[index])
    losses.append(loss)
    if step % args.eval_every == 0 or step == args.steps:
      records.append({"step": step, "images_seen": step * args.batch_size,
                      "train_loss": round(float(np.mean(losses)), 4),
                      "test_accuracy": round(test_accuracy(), 4),
                      "seconds": round(time.perf_counter() - start, 1)})
      losses = []
      print(json.dumps(records[-1]), flush=True)
  if args.out:
    args.out.write_text(json.dumps({"model": args.model, "width": args.width,
                                    "batch_size": args.batch_size, "num_train": len(train_y),
                                    "num_test": len(test_y), "cache": (args.cache or args.generated).name,
                                    "label": args.label,
                                    "seed": args.seed, "curve": records}, indent=2) + "\n")


if __name__ == "__main__":
  main()
