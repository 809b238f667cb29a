"""The data contract between tasks and the runner: a task's spec (spec), the prepared cache and its
checks (cache, integrity), how a prepare decides and writes it (build, fingerprint, atomic,
row_writer), and batches drawn from it (batches); and what the runner shares with it: sha256
manifests (manifest: caches, checkpoints, packs), the progress meter (progress: data, training)."""
