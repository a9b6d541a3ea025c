# Tuning and benchmarking (README: "Tune the batching" and "Benchmark").
#   make tune                                   hill-climb for the encoder, p99 <= TUNE_P99_MS
#   make tune TUNE_ARGS="--rate 40,80 --apply"  open-loop traffic; write the winner into model_repository/
#   make bench                                  side-by-side report in reports/bench/
#   make bench BENCH_ARGS="--configs mixed --rounds 2"   the committed config beside no batching only
#   make loadgen LOADGEN_ARGS="--concurrency 1,16"
TUNE_P99_MS ?= 250
TUNE_ARGS ?=
BENCH_ARGS ?=
LOADGEN_ARGS ?=

.PHONY: tune bench loadgen

tune: export ## tune the encoder's batching for p99 <= TUNE_P99_MS (TUNE_ARGS="--apply" writes it back)
	$(PY) -m tools.tune --model encoder --p99-ms $(TUNE_P99_MS) $(TUNE_ARGS)

bench: export ## side-by-side benchmark report in reports/bench/ (BENCH_ARGS)
	$(PY) -m tools.bench $(BENCH_ARGS)

loadgen: export ## drive load and print throughput and latency (LOADGEN_ARGS="--concurrency 1,16")
	$(PY) -m tools.loadgen $(LOADGEN_ARGS)
