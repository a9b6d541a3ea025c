# Encoder precision (docs/export.md): fp32 vs int8 (dynamic, static) vs fp16, speed and quality in one run.
#   make bench-precision                                       5 interleaved rounds, report in reports/precision/ (~2 min)
#   make bench-precision BENCH_PRECISION_ARGS="--rounds 9 --threads 2"
BENCH_PRECISION_ARGS ?=

.PHONY: bench-precision

bench-precision: export ## fp32 vs int8 vs fp16: speed and quality-gate figures in one run, reports/precision/ (~2 min)
	$(PY) -m tools.bench.precision $(BENCH_PRECISION_ARGS)
