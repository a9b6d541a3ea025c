# OpenAI-compatible gateway (docs/gateway.md). `make serve` already runs it
# beside Triton on 127.0.0.1:8080 (SERVE_ARGS="--no-gateway" or "--gateway-port 9090").
#   make gateway GATEWAY_ARGS="--triton-url 127.0.0.1:8001 --port 8080"   the gateway alone, for a Triton already running
#   make bench-gateway                                                     gateway vs Triton's HTTP/JSON (vs infinity-emb), reports/bench-gateway/
GATEWAY_ARGS ?=
BENCH_GATEWAY_ARGS ?=

.PHONY: gateway bench-gateway

gateway: export ## run the OpenAI-compatible gateway alone against a running Triton (GATEWAY_ARGS=...)
	$(PY) -m gateway $(GATEWAY_ARGS)

bench-gateway: export ## OpenAI gateway vs Triton's HTTP/JSON vs infinity-emb at concurrency 1/16/64, reports/bench-gateway/
	$(PY) -m tools.bench.gateway $(BENCH_GATEWAY_ARGS)

# infinity-emb in a virtual environment of its own (never the project's .venv), for bench-gateway's comparison.
INFINITY_VENV := build/infinity-venv
INFINITY_PIN := "infinity-emb[server,optimum]==0.0.78" "torch==2.13.0"  # the project's torch pin (the CPU wheel here)

.PHONY: infinity-venv

infinity-venv: ## install infinity-emb (pinned) into build/infinity-venv for `make bench-gateway`
	@test -x $(INFINITY_VENV)/bin/infinity_emb || { $(PYTHON) -m venv $(INFINITY_VENV) && $(INFINITY_VENV)/bin/python -m pip install --quiet $(INFINITY_PIN); }
