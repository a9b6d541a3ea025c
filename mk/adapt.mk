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
