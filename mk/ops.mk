# Operations targets: Docker stop, metrics summary, system packages for the ops tests.
# make stop                       remove a Docker stack left running (`make serve RUNTIME=docker` removes its own on Ctrl-C)
# make metrics                    terminal summary of Triton's metrics (METRICS_ARGS="--interval 10")
# make ops-deps                   apt-install prometheus and docker-compose when missing (tolerates failure)
# make ops-check                  lint/validate docker/, monitoring/ and deploy/ (no server, no engine)
# make gpu-variant                generate build/gpu_repository from the committed configs
# make prometheus-rule            regenerate deploy/k8s/components/prometheus-operator/prometheusrule.yaml from the rule file
METRICS_ARGS ?=
OPS_APT_PACKAGES := prometheus docker-compose

.PHONY: stop metrics ops-deps ops-check gpu-variant prometheus-rule

stop: $(STAMP) ## remove a Docker stack left running (`make serve RUNTIME=docker` removes its own on Ctrl-C)
	$(PY) -m tools.serve.docker_runtime down

metrics: $(STAMP) ## terminal summary of a running server's metrics (METRICS_ARGS="--interval 10")
	$(PY) -m tools.observe.metrics_summary $(METRICS_ARGS)

gpu-variant: export ## generate build/gpu_repository from the committed configs
	$(PY) -m tools.repo.variant --kind gpu

prometheus-rule: $(STAMP) ## regenerate deploy/k8s PrometheusRule from monitoring/prometheus/rules (a test checks it is current)
	$(PY) -m tools.observe.prometheus_rule

# Debian packages the ops tests use; missing ones are installed when apt-get can (root,
# package index reachable). A failure only warns: the tests that need them then skip and say why.
ops-deps: ## apt-install prometheus and docker-compose when missing (a failure only warns)
	@missing=""; \
	command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v docker-compose >/dev/null 2>&1 || missing="$$missing docker-compose"; \
	if [ -z "$$missing" ]; then echo "ops-deps: prometheus and docker-compose are installed"; \
	elif command -v apt-get >/dev/null 2>&1; then \
		echo "ops-deps: installing$$missing"; \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		( $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends$$missing ) >/dev/null \
			|| echo "ops-deps: WARNING: could not install$$missing; the tests that need them will skip"; \
	else echo "ops-deps: WARNING: no apt-get; install$$missing yourself or the tests that need them skip"; fi

ops-check: $(STAMP) ops-deps ## lint/validate docker/, monitoring/ and deploy/ (no server, no engine)
	$(PY) -m pytest tests/ops -m "not integration" $(PYTEST_ARGS)
