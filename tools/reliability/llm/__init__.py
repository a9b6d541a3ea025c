"""The generative model's reliability drill: `python -m tools.reliability.llm.soak`
(`make soak-llm`) and the traffic it sends (`traffic`)."""
