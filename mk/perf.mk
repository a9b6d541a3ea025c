# NVIDIA's perf_analyzer and Model Analyzer against our models (docker/README.md, "perf_analyzer and Model Analyzer").
#   make perf-inputs                      input data for embed and encoder + a Model Analyzer config, in build/perf/
#   make perf-inputs PERF_INPUTS_ARGS="--seq-len 64 --model-repository build/gpu_repository"
PERF_INPUTS_ARGS ?=

.PHONY: perf-inputs

perf-inputs: export ## perf_analyzer --input-data files (embed TEXT, encoder token ids) and Model Analyzer configs in build/perf/
	$(PY) -m tools.bench.perf_inputs $(PERF_INPUTS_ARGS)
