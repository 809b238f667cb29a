"""Training and evaluating a model: the one loop (train), the optimizer (optim), dropout's random
bits (dropout_rng) and `lra eval`'s evaluation of a saved checkpoint (evaluation).
May import: lra.runs, lra.machine, lra.base, lra.errors, and lra.tasks / lra.models /
lra.configs."""
