"""The step-level simulator of the `llm` model: a step cost model fitted on the engine, the
real llm/scheduler driven on a simulated clock, live validation, tuning and planning inputs."""
