# Padding policies on mixed-length traffic (docs/model-repository.md).
#   make bench-lengths                                          batch, buckets and ragged side by side
#   make bench-lengths BENCH_LENGTHS_ARGS="--concurrency 16 --priority-mix 1:0.2,2:0.8"
#   make length-policy POLICY=ragged                            write build/lengths/ragged (serve it with tools.serve)
BENCH_LENGTHS_ARGS ?=
POLICY ?= ragged

.PHONY: bench-lengths length-policy

bench-lengths: export ## padding policies batch, buckets and ragged side by side on mixed-length traffic, reports/bench-lengths/
	$(PY) -m tools.bench.lengths $(BENCH_LENGTHS_ARGS)

length-policy: export ## write build/lengths/<policy>: the repository with another padding policy (POLICY=batch|buckets|ragged)
	$(PY) -m tools.repo.length_policy --policy $(POLICY)
