"""Loadgen for the generative model (`python -m tools.loadgen --model llm`): `args` holds its
options and typed settings, `load` streams each level through the load driver, `report`
writes the table, the JSON and the GenAI-Perf-named CSV."""
