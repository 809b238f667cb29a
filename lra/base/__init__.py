"""What every room (and tasks/) uses: the progress meter of data work and training (progress) and
the sha256 manifests that seal prepared caches, checkpoints and packs (manifest).
May import: lra.errors only."""
