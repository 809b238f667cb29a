"""Is a Pathfinder set learnable? Trains a small CNN on a prepared cache and reports test accuracy.

  lra data generate pathfinder --out DIR --difficulty easy --num-images 20000 --stats
  lra data prepare pathfinder --source DIR --option difficulty=easy --cache-name pf_easy
  python tools/pathfinder_probe.py --cache ~/.cache/lra/pf_easy --steps 3000

A generator bug (labels that do not match the pictures, markers that give the label away) shows
up here quickly: accuracy stuck at 50% means nothing is learnable; accuracy at the marker-distance
threshold of the generator's stats.json means only the leak is. The CNN sees the 32x32 image
(not a token sequence), with the 8 symmetries of the square as augmentation (the label is
invariant to them), so a few thousand images go further. Prints one JSON line per evaluation and
writes the last to --out when given.
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


class ProbeCNN(nn.Module):
  """Convolutions at full resolution (the dashes are one pixel wide), then strided ones.

  [B, S, S, 1] in [0, 1] -> [B, 2] logits.
  """
  width: int = 16

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    w = self.width
    for channels, stride in ((w, 1), (2 * w, 1), (2 * w, 2), (4 * w, 1), (4 * w, 2), (4 * w, 1)):
      x = nn.relu(nn.Conv(channels, (3, 3), strides=stride)(x))
    x = jnp.concatenate([x.max(axis=(1, 2)), x.mean(axis=(1, 2))], axis=-1)
    return nn.Dense(2)(nn.relu(nn.Dense(4 * w)(x)))


def load(cache: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
  inputs = np.load(cache / f"{split}.inputs.npy", mmap_mode="r")
  side = int(round(inputs.shape[1] ** 0.5))
  images = np.asarray(inputs, dtype=np.float32).reshape(-1, side, side, 1) / 255.0
  return images, np.load(cache / f"{split}.label.npy").astype(np.int32)


def symmetry(images: np.ndarray, k: int) -> np.ndarray:
  """One of the 8 symmetries of the square (k in 0..7) applied to [B, S, S, 1] images."""
  out = np.rot90(images, k % 4, axes=(1, 2))
  return np.ascontiguousarray(out[:, :, ::-1] if k >= 4 else out)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--cache", type=Path, required=True, help="a prepared pathfinder cache")
  parser.add_argument("--steps", type=int, default=3000)
  parser.add_argument("--batch-size", type=int, default=64)
  parser.add_argument("--learning-rate", type=float, default=1e-3)
  parser.add_argument("--width", type=int, default=16)
  parser.add_argument("--eval-every", type=int, default=500)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", type=Path, help="write the final record here (JSON)")
  args = parser.parse_args()

  train_x, train_y = load(args.cache, "train")
  test_x, test_y = load(args.cache, "test")
  model = ProbeCNN(args.width)
  params = model.init(jax.random.PRNGKey(args.seed), train_x[:1])
  optimizer = optax.adamw(optax.cosine_decay_schedule(args.learning_rate, args.steps),
                          weight_decay=1e-4)
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
  start, record = time.perf_counter(), {}
  for step in range(1, args.steps + 1):
    index = rng.integers(0, len(train_y), args.batch_size)
    images = symmetry(train_x[index], int(rng.integers(0, 8)))
    params, opt_state, loss = train_step(params, opt_state, images, train_y[index])
    if step % args.eval_every == 0 or step == args.steps:
      record = {"step": step, "train_loss": round(float(loss), 4),
                "test_accuracy": round(test_accuracy(), 4), "num_train": len(train_y),
                "num_test": len(test_y), "seconds": round(time.perf_counter() - start, 1),
                "cache": str(args.cache), "seed": args.seed}
      print(json.dumps(record), flush=True)
  if args.out:
    args.out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
  main()
