"""Data the suite makes itself, seeded, in the release's formats: ListOps, Pathfinder, synthetic."""
