"""Pathfinder / Path-X generator: Linsley et al.'s snakes code as LRA ran it. params (LRA's
settings), strokes (paddle stencils), maps + snakes (growth), render (pixels, PNG), stats,
metadata (text or np.save rows) and generate (the release layout on disk)."""
