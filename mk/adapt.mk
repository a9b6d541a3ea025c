# Adaptive batching delay (docs/adapt.md).
#   make adapt ADAPT_ARGS="--url localhost:8000 --admin-key-file KEY"   run the controller against a server
#   make bench-adapt                                                     static configs vs the controller, reports/adapt/ (~5 min)
ADAPT_P99_MS ?= 150
ADAPT_ARGS ?=
BENCH_ADAPT_ARGS ?=

.PHONY: adapt bench-adapt

adapt: export ## live delay controller against a p99 SLO (ADAPT_P99_MS, ADAPT_ARGS; docs/adapt.md)
	$(PY) -m tools.adapt --model encoder --p99-ms $(ADAPT_P99_MS) $(ADAPT_ARGS)

bench-adapt: export ## static configs vs the controller, report in reports/adapt/ (~5 min)
	$(PY) -m tools.adapt.evaluate --p99-ms $(ADAPT_P99_MS) $(BENCH_ADAPT_ARGS)

# The LLM's token budget and max-wait (docs/adapt.md, "The LLM").
#   make sim-adapt-llm      controller vs every static budget in the step-level simulator (seconds)
#   make bench-adapt-llm    the same live, on a local Triton serving llm (~12 min)
ADAPT_LLM_SLO ?= ttft_p99=10s,tpot_p99=600ms
ADAPT_LLM_SLO_LIVE ?= ttft=10,tpot=0.6
SIM_ADAPT_LLM_ARGS ?= --rate 0.25
BENCH_ADAPT_LLM_ARGS ?= --rate 0.3 --seconds 120 --budgets 64,256,1024 --window 10 --min-interval 20

.PHONY: sim-adapt-llm bench-adapt-llm

sim-adapt-llm: ## the LLM controller vs static budgets in the simulator, reports/adapt-llm/sim.json
	$(PY) -m tools.simulate.llm.adapt --slo $(ADAPT_LLM_SLO) --json reports/adapt-llm/sim.json $(SIM_ADAPT_LLM_ARGS)

bench-adapt-llm: export ## the LLM controller vs static budgets live, reports/adapt-llm/live.json (~12 min)
	$(PY) -m tools.adapt --model llm bench --slo $(ADAPT_LLM_SLO_LIVE) --json reports/adapt-llm/live.json $(BENCH_ADAPT_LLM_ARGS)
