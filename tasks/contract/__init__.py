"""The data contract between tasks and the runner: a task's spec, the prepared cache, batches."""
