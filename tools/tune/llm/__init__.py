"""`python -m tools.tune --model llm`: the `llm` model's scheduler knobs for a TTFT/TPOT SLO."""
