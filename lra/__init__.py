"""The Long Range Arena suite's runner, in rooms by role. Each imports only the rooms below it:

  cli/        the `lra` command, one module per command                     (top: imports any)
  bench/      step time and memory, an epoch's time, the fitting screen
  report/     results, tables, status, plots, summaries, the ledger
  run.py      `lra.run.run`: config, data, run folder, train (the library's entry point)
  training/   the loop, optimizer, dropout bits, evaluation of a checkpoint
  runs/       a run's config and its folder: identity, lock, files, checkpoints, archive
  machine/    devices and hosts, memory, isolated calls, signals, wall-time limits
  base/       what every room and tasks/ use: the progress meter, the sha256 manifests (seals)
  errors.py   a user's mistake as opposed to a bug (imports nothing; tasks, models, configs use it)

tests/test_layout.py holds the order and fails on an import against it or an import circle.
"""
