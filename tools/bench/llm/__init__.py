"""`python -m tools.bench.llm` (`make bench-llm`): streaming load against generative targets.

One seeded workload (prompt and output lengths, prompt texts), one streaming client per
protocol (gRPC bidirectional streaming to Triton's `llm` model, the OpenAI streaming endpoint
to llama.cpp's `llama-server`), one record per request with every token's arrival time, and
the figures LLM serving is judged by: output tokens/s, TTFT, TPOT, ITL and goodput under an
SLO (DistServe's definition). Targets: the `llm` model in its three scheduler modes, reloaded
live with a config override, and `llama-server` on the same GGUF weights.
"""
