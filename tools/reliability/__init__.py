"""Long-running reliability drills on the load engine: a bounded soak and an overload run."""
