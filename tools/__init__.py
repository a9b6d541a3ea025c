"""Serving, client, measurement and tuning tools around the Triton model repository.

One package per concern: `serve` (run Triton), `repo` (the model repository's configs and
variants), `observe` (what a running server reports), `load` + `loadgen` (drive load and
measure), `tune`, `adapt`, `bench`, `reliability`, `simulate` (a model of the batcher);
`cli` holds what every command shares. Top-level modules are the shared vocabulary (`paths`,
`contract`, `triton_client`, `embed`) and `plan` (capacity planning on the simulator).
"""
