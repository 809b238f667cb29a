"""Pathfinder generator internals: parameter table, snake geometry, drawing and PNG, statistics."""
