"""Command-line entry points: `sparselift-opt` and `sparselift`."""
