"""The runtime: run Triton locally (the wheel's tritonserver) or in Docker, and keep it healthy.

`python -m tools.serve` is the entry point; `local_triton` and `server_session` start a
server for the other tools; the Python-based backends it installs live in the top-level
`backends/` (code that runs inside Triton).
"""
