"""S5's own trainer (a clone of lindermanlab/S5) on the `squares_published` data, from our initial
parameters, with its own dropout on: does the batch order decide whether it leaves chance?

  python tools/s5_order_study.py CLONE --order ours|s5 --order-seed K [--schedule ours|s5]
                                 [--steps 6000] --out results/s5_diagnosis/orders/NAME.jsonl

`--order ours`: the batches `lra run` draws with train.seed K (tasks/contract/batches.py);
`--order s5`: a NumPy RandomState(K) permutation per epoch, as the harness that ran S5's own code
on our arrays drew them (its DataLoader(shuffle=True) stand-in). `--schedule s5`: S5's trainer's
own rates (lra.bench.peer_s5); `ours`: optax's warm-up from 0 (what the preset ran before
2026-12-04). One JSON line per 1,000 steps, with S5's `validate` on the first 4,000 val images
every 2,000 (results/s5_diagnosis/README.md reads them).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from lra.bench import peer_s5
from lra.models.encoder import token_values
from lra.runs.config_loading import default_data_dir, load_data, resolve_config
from lra.tasks.contract.batches import step_batches
from lra.training import optim, train

EVAL_EXAMPLES = 4000


def s5_order(arrays, batch_size: int, seed: int):
  """Endless batches: a RandomState(seed) permutation per epoch, the remainder dropped."""
  rng, n = np.random.RandomState(seed), len(arrays["label"])
  while True:
    perm = rng.permutation(n)
    for i in range(0, n - batch_size + 1, batch_size):
      rows = perm[i:i + batch_size]
      order = np.argsort(rows)  # sorted reads of the memmap, then the permutation's order
      inputs = np.empty((batch_size, arrays["inputs"].shape[1]), np.int32)
      inputs[order] = arrays["inputs"][rows[order]]
      yield {"inputs": inputs, "label": np.asarray(arrays["label"])[rows]}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("clone", type=Path)
  parser.add_argument("--order", choices=("ours", "s5"), required=True)
  parser.add_argument("--order-seed", type=int, default=0)
  parser.add_argument("--schedule", choices=("ours", "s5"), default="s5")
  parser.add_argument("--dropout", type=float, default=0.05)
  parser.add_argument("--steps", type=int, default=6000)
  parser.add_argument("--warmup", type=int, default=1000)
  parser.add_argument("--out", type=Path, required=True)
  args = parser.parse_args(argv)
  config = resolve_config("pathfinder", "s5", "squares_published",
                          [f"train.warmup_steps={args.warmup}"])
  data = load_data(config, Path(default_data_dir()))
  trainer = peer_s5.S5Trainer(args.clone, config, data.spec, dropout=args.dropout)
  s = train.setup(config, data.spec)
  trainer.start(jax.device_get(train.model_variables(train.init_state(s, data.spec, 0))))
  arrays = data.split("train")
  batches = (s5_order(arrays, 32, args.order_seed) if args.order == "s5" else
             (b for (b,) in step_batches(arrays, data.spec, 32, args.order_seed)))
  ours = (optim.learning_rate_schedule(config.train),
          optim.learning_rate_schedule(config.train, config.train.ssm_learning_rate))
  val = data.split("val")
  pixels = jnp.asarray(np.asarray(val["inputs"][:EVAL_EXAMPLES]), jnp.float32) / 127.5 - 1.0
  x_val = token_values(pixels, config.model.patch).reshape(EVAL_EXAMPLES, trainer.seq_len, -1)
  y_val = np.asarray(val["label"][:EVAL_EXAMPLES])
  out = args.out.open("w")
  # No machine paths in a committed record: the clone is CLONE, the output its file's own name.
  header = {**vars(args), "clone": "CLONE", "out": args.out.name}
  out.write(json.dumps(header, default=str) + "\n")
  losses, began = [], time.time()
  for step in range(args.steps):
    rates = None if args.schedule == "s5" else tuple(float(f(step)) for f in ours)
    losses.append(trainer.step(next(batches), step, rates=rates))
    if (step + 1) % 1000 == 0:
      record = {"step": step + 1, "train_loss": float(np.mean(losses)),
                "steps_per_s": (step + 1) / (time.time() - began)}
      losses = []
      if (step + 1) % 2000 == 0:
        record["val_acc"] = trainer.accuracy(x_val, y_val)
      out.write(json.dumps(record) + "\n")
      out.flush()
      print(json.dumps(record), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
