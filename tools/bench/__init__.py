"""`make bench`: the raw engine, Triton's batching configs and a naive batcher, side by side."""
