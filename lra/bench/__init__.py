"""Measurements of mixers outside the table's runs: train-step time and memory per length
(step_time), one epoch per batching mode (epoch), and the fitting screen (fit_screen).
May import: lra.run, lra.report, lra.training, lra.runs, lra.machine, lra.base, lra.errors, and
lra.tasks / lra.models / lra.configs."""
