# The LLM's step-level simulator, tuner and planner (docs/simulate.md, docs/tuning.md: the LLM sections).
# LLM_ENGINE=native (config.pbtxt, default) or vllm (configs/vllm.pbtxt: vLLM's knobs, its own step cost model).
#   make llm-calibrate          this CPU's step cost model -> build/simulate/llm-step-cost[-vllm].json (a few minutes)
#   make llm-validate           predicted vs measured on a local Triton, reports/simulate/llm-validation[-vllm].json
#   make tune-llm QUICK=1       quick calibration, the space simulated, the top 2 and the config measured (~5-8 min here)
#   make tune-llm TUNE_LLM_ARGS="--rate 0.5 --apply"
#   make plan-llm PLAN_LLM_ARGS="--rate 2"       (the native engine)
#   make bench-tune-llm         the model-guided pick against a live grid of the same candidates, then a rematch
#                               (native: 20 candidates, ~30-40 min here; vllm: 18, ~25-35 min: each reload restarts vLLM)
VLLM_SELECTED := $(filter vllm,$(LLM_ENGINE))
comma := ,
LLM_COST_MODEL ?= build/simulate/llm-step-cost$(if $(VLLM_SELECTED),-vllm).json
LLM_SLO ?= $(if $(VLLM_SELECTED),ttft_p99=2s$(comma)tpot_p99=80ms,ttft_p99=1s$(comma)tpot_p99=100ms)
TUNE_LLM_ARGS ?=
PLAN_LLM_ARGS ?= --rate 1
LLM_VALIDATE_ARGS ?=
LLM_THREADS ?= 0
# LLM_THREADS: torch threads of the native engine when calibrating (0: torch's default, as the server; 1 on a
# crowded machine); vLLM takes its threads from the machine.
LLM_CALIBRATE_FLAGS = --engine $(LLM_ENGINE) $(if $(VLLM_SELECTED),,--threads $(LLM_THREADS))
LLM_TUNE_CALIBRATE_FLAGS = --quick --cost-model calibrate $(if $(VLLM_SELECTED),,--calibrate-threads $(LLM_THREADS))
# a space small enough for a live grid, at a load and SLO where the knobs bind on a 2-core CPU. vLLM: 12 streams,
# so slots below it queue and slots at it stretch TPOT; budgets 128/256/512 and the chunk cap off or 64:
# 18 candidates, each a vLLM restart (~36-46 s on 2 cores) and a 20 s level.
BENCH_TUNE_LLM_NATIVE_ARGS ?= --slo ttft_p99=5s,tpot_p99=300ms --concurrency 8 --quick --cost-model calibrate --live-scale \
	--max-num-seqs 4,8 --max-num-batched-tokens 64,256,512 --long-prefill-token-threshold 64,256 --max-wait-ms 0,100
BENCH_TUNE_LLM_VLLM_ARGS ?= --engine vllm --slo ttft_p99=2s,tpot_p99=80ms --concurrency 12 --quick --cost-model calibrate --live-scale \
	--max-num-seqs 4,8,12 --max-num-batched-tokens 128,256,512 --long-prefill-token-threshold 0,64
BENCH_TUNE_LLM_ARGS ?= $(if $(VLLM_SELECTED),$(BENCH_TUNE_LLM_VLLM_ARGS),$(BENCH_TUNE_LLM_NATIVE_ARGS))

.PHONY: llm-calibrate llm-validate tune-llm plan-llm bench-tune-llm

llm-calibrate: export ## time the LLM engine's steps on this CPU and fit the step cost model (LLM_COST_MODEL; LLM_ENGINE=vllm: vLLM's)
	$(PY) -m tools.simulate llm calibrate $(LLM_CALIBRATE_FLAGS) --out $(LLM_COST_MODEL)

llm-validate: export ## the LLM simulator's predictions vs a local Triton (calibrates first without a cost model; LLM_ENGINE=vllm)
	@test -f $(LLM_COST_MODEL) || $(PY) -m tools.simulate llm calibrate $(LLM_CALIBRATE_FLAGS) --out $(LLM_COST_MODEL)
	$(PY) -m tools.simulate llm validate --engine $(LLM_ENGINE) --cost-model $(LLM_COST_MODEL) \
		--json reports/simulate/llm-validation$(if $(VLLM_SELECTED),-vllm).json $(LLM_VALIDATE_ARGS)

tune-llm: export ## model-guided tuning of the LLM's batching knobs for LLM_SLO (QUICK=1: ~5 min; LLM_ENGINE=vllm; TUNE_LLM_ARGS="--apply")
	$(PY) -m tools.tune --model llm --engine $(LLM_ENGINE) --slo $(LLM_SLO) $(if $(filter 1,$(QUICK)),$(LLM_TUNE_CALIBRATE_FLAGS)) $(TUNE_LLM_ARGS)

plan-llm: $(STAMP) ## LLM replicas, KV memory and the scaling signal for a rate (PLAN_LLM_ARGS="--rate 2"; the native engine)
	$(if $(VLLM_SELECTED),$(error plan-llm plans the native engine; run it without LLM_ENGINE=vllm))
	@test -f $(LLM_COST_MODEL) || $(PY) -m tools.simulate llm calibrate $(LLM_CALIBRATE_FLAGS) --out $(LLM_COST_MODEL)
	$(PY) -m tools.plan --model llm --slo $(LLM_SLO) --cost-model $(LLM_COST_MODEL) $(PLAN_LLM_ARGS)

bench-tune-llm: export ## the model-guided pick vs a live grid over one space: goodput and wall time, reports/bench-tune-llm/ (BENCH_TUNE_LLM_ARGS; LLM_ENGINE=vllm)
	$(PY) -m tools.tune.llm.versus_grid $(if $(VLLM_SELECTED),--out reports/bench-tune-llm-vllm,--calibrate-threads $(LLM_THREADS)) $(BENCH_TUNE_LLM_ARGS)
