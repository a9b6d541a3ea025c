"""Serving the generative model: `engine` says which engine (native or vLLM) serves `llm` when a
command starts its own Triton."""
