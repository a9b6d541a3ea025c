# Load tests with locust (loadtest/README.md). Examples:
#   make loadtest                                   steady 60 s, 8 users, default SLOs
#   make loadtest LOADTEST_ARGS="--shape burst --users 32 --run-time 30"
#   make loadtest-ui                                locust's web UI on http://127.0.0.1:8089
#   make loadtest-llm                               streaming LLM users: TTFT, ITL, e2e against the LLM SLO
LOADTEST_ARGS ?=

.PHONY: loadtest loadtest-ui loadtest-llm

loadtest: export ## locust load test with an SLO verdict (LOADTEST_ARGS; loadtest/README.md)
	$(PY) -m loadtest.run $(LOADTEST_ARGS)

loadtest-ui: export ## the same with locust's web UI on http://127.0.0.1:8089
	$(PY) -m loadtest.run --ui $(LOADTEST_ARGS)

loadtest-llm: export ## locust LLM users streaming from `llm`, with a TTFT/ITL SLO verdict (LOADTEST_ARGS)
	$(PY) -m loadtest.run --workload llm --llm-engine $(LLM_ENGINE) $(LOADTEST_ARGS)
