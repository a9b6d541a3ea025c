"""Long-running reliability drills on the load driver: a bounded soak and an overload run."""
