"""What the Triton model needs besides the engine: its knobs from the model config, each
request's inputs parsed and validated, and the replies each engine output turns into.
Pure Python (no Triton, no torch), so every rule here is unit-tested without a server."""
