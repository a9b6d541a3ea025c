# Predict, then measure: a simulator of Triton's dynamic batcher (docs/simulate.md).
#   make simulate-calibrate     this machine's cost model -> build/simulate/cost-model.json (~2 min, local server)
#   make simulate-validate      predicted vs measured for every config of SIMULATE_CONFIGS, reports/simulate/ (~8 min)
#   make simulate-validate SIMULATE_CONCURRENCY=1,4,16 SIMULATE_RATE=30
SIMULATE_COST_MODEL ?= build/simulate/cost-model.json
SIMULATE_CONFIGS ?= tools/simulate/validation-configs.yaml
SIMULATE_CONCURRENCY ?= 1,8
SIMULATE_RATE ?= 40
SIMULATE_ARGS ?=

.PHONY: simulate-calibrate simulate-validate

simulate-calibrate: export ## measure this machine's cost model into SIMULATE_COST_MODEL (~2 min, starts its own server)
	$(PY) -m tools.simulate calibrate --out $(SIMULATE_COST_MODEL)

simulate-validate: export ## predicted vs measured for SIMULATE_CONFIGS, reports/simulate/ (calibrates first if there is no cost model)
	@test -f $(SIMULATE_COST_MODEL) || $(PY) -m tools.simulate calibrate --out $(SIMULATE_COST_MODEL)
	$(PY) -m tools.simulate validate --cost-model $(SIMULATE_COST_MODEL) --configs $(SIMULATE_CONFIGS) \
		--concurrency $(SIMULATE_CONCURRENCY) --rate $(SIMULATE_RATE) --json reports/simulate/validation.json $(SIMULATE_ARGS)
