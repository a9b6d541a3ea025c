"""The batching tuner's parts: search space, strategies, objectives, live reloads, reports."""
