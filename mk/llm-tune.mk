# The LLM's step-level simulator, tuner and planner (docs/simulate.md, docs/tuning.md: the LLM sections).
#   make llm-calibrate          this CPU's step cost model -> build/simulate/llm-step-cost.json (in-process, a few minutes)
#   make llm-validate           predicted vs measured on a local Triton, reports/simulate/llm-validation.json
#   make tune-llm QUICK=1       quick calibration, 72 candidates simulated, the top 2 and the config measured (~5-8 min here)
#   make tune-llm TUNE_LLM_ARGS="--rate 0.5 --apply"
#   make plan-llm PLAN_LLM_ARGS="--rate 2"
#   make bench-tune-llm         the model-guided pick against a live grid of the same 20 candidates, then a rematch (~30-40 min here)
LLM_COST_MODEL ?= build/simulate/llm-step-cost.json
LLM_SLO ?= ttft_p99=1s,tpot_p99=100ms
TUNE_LLM_ARGS ?=
PLAN_LLM_ARGS ?= --rate 1
LLM_VALIDATE_ARGS ?=
LLM_THREADS ?= 0
# a space small enough for a live grid, at a load and SLO where the knobs bind on a 2-core CPU
BENCH_TUNE_LLM_ARGS ?= --slo ttft_p99=5s,tpot_p99=300ms --concurrency 8 --quick --cost-model calibrate --live-scale \
	--max-num-seqs 4,8 --max-num-batched-tokens 64,256,512 --long-prefill-token-threshold 64,256 --max-wait-ms 0,100
# LLM_THREADS: torch threads when calibrating (0: torch's default, as the server; 1 on a crowded machine)

.PHONY: llm-calibrate llm-validate tune-llm plan-llm bench-tune-llm

llm-calibrate: export ## time the LLM engine's steps on this CPU and fit the step cost model (LLM_COST_MODEL)
	$(PY) -m tools.simulate llm calibrate --threads $(LLM_THREADS) --out $(LLM_COST_MODEL)

llm-validate: export ## the LLM simulator's predictions vs a local Triton (calibrates first without a cost model)
	@test -f $(LLM_COST_MODEL) || $(PY) -m tools.simulate llm calibrate --threads $(LLM_THREADS) --out $(LLM_COST_MODEL)
	$(PY) -m tools.simulate llm validate --cost-model $(LLM_COST_MODEL) --json reports/simulate/llm-validation.json $(LLM_VALIDATE_ARGS)

tune-llm: export ## model-guided tuning of the LLM's scheduler for LLM_SLO (QUICK=1: ~5 min; TUNE_LLM_ARGS="--apply")
	$(PY) -m tools.tune --model llm --slo $(LLM_SLO) $(if $(filter 1,$(QUICK)),--quick --cost-model calibrate --calibrate-threads $(LLM_THREADS)) $(TUNE_LLM_ARGS)

plan-llm: $(STAMP) ## LLM replicas, KV memory and the scaling signal for a rate (PLAN_LLM_ARGS="--rate 2")
	@test -f $(LLM_COST_MODEL) || $(PY) -m tools.simulate llm calibrate --threads $(LLM_THREADS) --out $(LLM_COST_MODEL)
	$(PY) -m tools.plan --model llm --slo $(LLM_SLO) --cost-model $(LLM_COST_MODEL) $(PLAN_LLM_ARGS)

bench-tune-llm: export ## the model-guided pick vs a live grid over one space: goodput and wall time, reports/bench-tune-llm/ (BENCH_TUNE_LLM_ARGS)
	$(PY) -m tools.tune.llm.versus_grid --calibrate-threads $(LLM_THREADS) $(BENCH_TUNE_LLM_ARGS)
