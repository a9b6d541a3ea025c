"""What a running server reports of the generative model: `summary` holds the `llm` model's
lines of `make metrics`."""
