"""What every room (and tasks/) uses: the progress meter of data work and training (progress), the
sha256 manifests that seal caches, checkpoints and packs (manifest), a user's frame (tracebacks).
May import: lra.errors only."""
