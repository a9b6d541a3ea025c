"""The runtime: run Triton locally (the wheel's tritonserver) or in Docker, and keep it healthy.

`python -m tools.serve` is the entry point; `local_triton` and `server_session` start a
server for the other tools, and `backends/` holds our Python-based backends.
"""
