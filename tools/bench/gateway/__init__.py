"""`python -m tools.bench.gateway` (`make bench-gateway`): the OpenAI gateway's cost, measured
against Triton's own HTTP/JSON endpoint and, when installed, infinity-emb (__main__.py says how).

One job per module: settings (the options), endpoints (what each target is sent and answers),
client (the closed-loop HTTP client), infinity_server and infinity_model (the optional
comparison server and the ONNX export it needs), benchmark (one run), report (its markdown)."""
