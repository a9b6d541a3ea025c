"""Benchmarks: `python -m tools.bench` (`make bench`) sets the raw engine, Triton's batching
configs and a naive batcher side by side; `lengths`, `padding`, `precision`, `gateway` and
`perf_analyzer_check` measure one question each; `perf_inputs` feeds NVIDIA's perf_analyzer.
The generative model's benchmarks are `llm` (`python -m tools.bench.llm`, `make bench-llm`;
`python -m tools.bench.llm.lora`, `make bench-lora`)."""
