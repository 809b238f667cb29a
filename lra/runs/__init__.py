"""A run and its folder: the config a command resolves (config_loading, command), its identity,
lock, files (writers, loggers), checkpoints, best parameters and archive (pack).
May import: lra.machine, lra.base, lra.errors, and lra.tasks / lra.models / lra.configs."""
