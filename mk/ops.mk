# Operations targets: Docker stop, metrics summary, system packages for the ops tests.
# make stop                       remove a Docker stack left running (`make serve RUNTIME=docker` removes its own on Ctrl-C)
# make metrics                    terminal summary of Triton's metrics (METRICS_ARGS="--interval 10")
# make ops-deps                   apt-install prometheus and docker-compose when missing (tolerates failure)
# make ops-check                  lint/validate docker/, monitoring/ and deploy/ (no server, no engine)
# make gpu-variant                generate build/gpu_repository from the committed configs
# make vllm-gpu-variant           generate build/vllm_gpu_repository (`llm` on NVIDIA's Triton vLLM container)
# make vllm-gpu-bundle            build/vllm-gpu-bundle: tokenizer files and wheels tools/gpu/vllm_check.sh needs offline
# make vllm-gpu-check             run tools/gpu/vllm_check.sh on this GPU host (VLLM_CHECK_ARGS="--steps env,parity")
# make prometheus-rule            regenerate deploy/k8s/components/prometheus-operator/prometheusrule.yaml from the rule file
METRICS_ARGS ?=
VLLM_CHECK_ARGS ?=
OPS_APT_PACKAGES := prometheus docker-compose
VLLM_GPU_BUNDLE := build/vllm-gpu-bundle
VLLM_GPU_META := config.json generation_config.json tokenizer.json tokenizer_config.json chat_template.jinja
# What the check's own imports need beyond a GPU host's torch stack (tools.bench.llm imports
# tritonclient): the project's pins, as cp312 manylinux wheels (the lent machines' Python).
VLLM_GPU_WHEELS = $(shell sed -n 's/\[.*\]//; /^\(tritonclient\|protobuf\)==/p' requirements.txt) \
	python-rapidjson==$(shell $(PY) -c "from importlib.metadata import version; print(version('python-rapidjson'))")
WHEEL_PLATFORMS := --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
	--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64

.PHONY: stop metrics ops-deps ops-check gpu-variant vllm-gpu-variant vllm-gpu-bundle vllm-gpu-check prometheus-rule

stop: $(STAMP) ## remove a Docker stack left running (`make serve RUNTIME=docker` removes its own on Ctrl-C)
	$(PY) -m tools.serve.docker_runtime down

metrics: $(STAMP) ## terminal summary of a running server's metrics (METRICS_ARGS="--interval 10")
	$(PY) -m tools.observe.metrics_summary $(METRICS_ARGS)

gpu-variant: export ## generate build/gpu_repository from the committed configs
	$(PY) -m tools.repo.variant --kind gpu

vllm-gpu-variant: export ## generate build/vllm_gpu_repository (`llm` on NVIDIA's Triton vLLM container) from the committed configs
	$(PY) -m tools.repo.variant --kind vllm-gpu

vllm-gpu-bundle: export ## build/vllm-gpu-bundle: tokenizer files and wheels tools/gpu/vllm_check.sh needs on an offline GPU host
	rm -rf $(VLLM_GPU_BUNDLE) && mkdir -p $(VLLM_GPU_BUNDLE)/hf-meta $(VLLM_GPU_BUNDLE)/wheels
	cp $(addprefix model_repository/llm/1/hf/,$(VLLM_GPU_META)) $(VLLM_GPU_BUNDLE)/hf-meta/
	$(PY) -m pip download -q --no-deps --only-binary=:all: $(WHEEL_PLATFORMS) -d $(VLLM_GPU_BUNDLE)/wheels $(VLLM_GPU_WHEELS) \
		|| echo "vllm-gpu-bundle: WARNING: no wheels (no package index here?); the check's tritonclient steps skip where it is missing"
	@du -sh $(VLLM_GPU_BUNDLE)

vllm-gpu-check: ## run tools/gpu/vllm_check.sh on this GPU host: parity, bench at 16/64/256 streams, calibration (VLLM_CHECK_ARGS)
	tools/gpu/vllm_check.sh $(VLLM_CHECK_ARGS)

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
