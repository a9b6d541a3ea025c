"""Streaming LLM load on the one load driver: the seeded workload, a streaming client per
protocol, one StreamRecord per request and the per-token figures (TTFT, TPOT, ITL, goodput)."""
