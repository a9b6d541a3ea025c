"""The batching tuner: `python -m tools.tune` and its parts (search space, strategies,
objectives, live reloads, reports)."""
