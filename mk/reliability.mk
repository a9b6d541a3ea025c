# Reliability: soak, overload table, and the reliability test tier (tests/reliability).
SOAK_MINUTES ?= 10
SOAK_RATE ?= 20
SOAK_ARGS ?=
OVERLOAD_ARGS ?=

.PHONY: soak overload test-reliability

soak: export
	$(PY) -m tools.soak --minutes $(SOAK_MINUTES) --rate $(SOAK_RATE) $(SOAK_ARGS)

overload: export
	$(PY) -m tools.overload $(OVERLOAD_ARGS)

test-reliability: export
	$(PY) -m pytest tests/reliability $(PYTEST_ARGS)
