"""Measurements of mixers outside the table's runs: train-step time and memory per length
(step_time), one epoch per batching mode (epoch), and the fitting screen (fit_screen).
May import: every room but cli (lra.run, report, training, runs, machine, errors), and tasks."""
