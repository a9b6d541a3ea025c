# Tuning and benchmarking (docs/tuning.md, docs/benchmark.md).
#   make tune                                   hill-climb for the encoder, p99 <= TUNE_P99_MS
#   make tune QUICK=1                           first step on new hardware (~2-3 min): calibrate, simulate, measure the top 2, apply
#   make tune TUNE_ARGS="--rate 40,80 --apply"  open-loop traffic; write the winner into model_repository/
#   make bench                                  side-by-side report in reports/bench/
#   make bench BENCH_ARGS="--configs mixed --rounds 2"   the committed config beside no batching only
#   make loadgen LOADGEN_ARGS="--concurrency 1,16"
TUNE_P99_MS ?= 250
TUNE_ARGS ?=
QUICK ?=
# QUICK=1: a quick cost model of this machine, the whole space simulated, the top 2 and Triton's default
# measured at 1 and 8 clients, the winner written into model_repository/encoder/config.pbtxt
TUNE_QUICK_ARGS := --strategy model-guided --cost-model calibrate --top 2 --confirm 1 --concurrency 1,8 --max-windows 3 --apply
BENCH_ARGS ?=
LOADGEN_ARGS ?=

.PHONY: tune bench loadgen

tune: export ## tune the encoder's batching for p99 <= TUNE_P99_MS (TUNE_ARGS="--apply" writes it back; QUICK=1: first step on new hardware)
	$(PY) -m tools.tune --model encoder --p99-ms $(TUNE_P99_MS) $(if $(filter 1,$(QUICK)),$(TUNE_QUICK_ARGS)) $(TUNE_ARGS)

bench: export ## side-by-side benchmark report in reports/bench/ (BENCH_ARGS)
	$(PY) -m tools.bench $(BENCH_ARGS)

loadgen: export ## drive load and print throughput and latency (LOADGEN_ARGS="--concurrency 1,16")
	$(PY) -m tools.loadgen $(LOADGEN_ARGS)
