# Everything runs from a project-local virtual environment that the targets create.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUNTIME ?= auto
# Export target: onnx (default) or tensorrt (GPU host with the tensorrt package).
TARGET ?= onnx
# Encoder precision: fp32 (the default when empty), fp16 (GPU hosts) or int8 (README "Precision");
# with TARGET=tensorrt empty means TensorRT's FP16 engine.
PRECISION ?=
# Extra arguments, e.g. make serve SERVE_ARGS="--http-port 9000", make test PYTEST_ARGS="-m 'not integration'"
SERVE_ARGS ?=
EXPORT_ARGS ?=
PYTEST_ARGS ?=

.PHONY: help venv export serve test lint format clean

help:
	@echo "make serve     set up .venv, export the model if needed, run Triton (Ctrl-C stops; RUNTIME=local|docker|auto)"
	@echo "make test      set up .venv, export the model if needed, run the whole test suite"
	@echo "make export    export the model to model_repository/ (no-op when up to date; PRECISION=fp32|fp16|int8)"
	@echo "make tune      tune the encoder's batching for a p99 SLO (TUNE_ARGS=...)"
	@echo "make bench     side-by-side benchmark report in reports/bench/"
	@echo "make loadtest  locust load test with an SLO verdict (see loadtest/README.md)"
	@echo "make metrics   terminal summary of a running server's metrics"
	@echo "make stop      stop the Docker stack (RUNTIME=docker)"
	@echo "make lint      ruff check and format check"
	@echo "make clean     remove build outputs and exported artifacts (keeps .venv)"

$(STAMP): requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	@touch $@

venv: $(STAMP)

export: $(STAMP)
	$(PY) -m export --target $(TARGET) $(if $(PRECISION),--precision $(PRECISION)) $(EXPORT_ARGS)

serve: export
	$(PY) -m tools.serve --runtime $(RUNTIME) $(SERVE_ARGS)

test: export ops-deps
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: $(STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

clean:
	rm -rf build reports .pytest_cache
	rm -f model_repository/encoder/1/model.onnx model_repository/encoder/1/export_manifest.json model_repository/tokenizer/1/tokenizer.json

# Targets contributed by feature areas (load tests, monitoring, ...), one file each.
-include mk/*.mk
