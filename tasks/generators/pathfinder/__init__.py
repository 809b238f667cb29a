"""Pathfinder generator: parameter table, snake geometry, drawing and PNG, statistics, and
`generate` (the release layout on disk)."""
