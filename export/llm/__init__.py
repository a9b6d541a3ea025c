"""The LLM step of `python -m export`: the weights' source, the native engine's checkpoint and the
vLLM checkpoint, each behind its parity gate (docs/decisions/llm-tooling-layout.md)."""
