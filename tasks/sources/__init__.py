"""Readers of the real LRA source formats (release TSVs and PNGs, IMDb, CIFAR-10) into the cache."""
