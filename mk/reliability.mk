# Reliability: soak, overload table, and the reliability test tier (tests/reliability).
SOAK_MINUTES ?= 10
SOAK_RATE ?= 20
SOAK_ARGS ?=
OVERLOAD_ARGS ?=

.PHONY: soak overload test-reliability

soak: export ## steady load for SOAK_MINUTES at SOAK_RATE req/s: latency and memory drift
	$(PY) -m tools.reliability.soak --minutes $(SOAK_MINUTES) --rate $(SOAK_RATE) $(SOAK_ARGS)

overload: export ## load far above capacity: who is rejected, per priority (OVERLOAD_ARGS)
	$(PY) -m tools.reliability.overload $(OVERLOAD_ARGS)

test-reliability: export ## the reliability test tier (tests/reliability)
	$(PY) -m pytest tests/reliability $(PYTEST_ARGS)

SOAK_LLM_SECONDS ?= 600
SOAK_LLM_ARGS ?=

.PHONY: soak-llm

soak-llm: export ## LLM soak for SOAK_LLM_SECONDS: 3 streaming paths, disconnects, bad requests, a burst; KV freed, memory level
	$(PY) -m tools.reliability.llm.soak --duration $(SOAK_LLM_SECONDS) --llm-engine $(LLM_ENGINE) $(SOAK_LLM_ARGS)
