"""Generative LLM serving with iteration-level (continuous) batching.

Runs inside Triton's Python backend (`model_repository/llm/1/model.py`) and in-process
for benchmarks; imports nothing from `tools/`. `contract` is the seam between the
scheduler (what runs in a step) and the engine (how a step runs).
"""
