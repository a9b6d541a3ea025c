"""What every tool, the gateway and the export agree on: Triton's default ports and the
pipeline's tensor names. Typed once here; a tool that can ask the served config for a
model's names (`TritonClient.config`) should, and use these only to build requests.

Dependency-free on purpose: the export (which needs torch) and the gateway (which needs
no server packages) import it as well.
"""

from __future__ import annotations

LOOPBACK = "127.0.0.1"  # servers bind to loopback by default: exposing them is a choice

# Triton's own defaults for its three endpoints.
HTTP_PORT = 8000
GRPC_PORT = 8001
METRICS_PORT = 8002
DEFAULT_HTTP_URL = f"{LOOPBACK}:{HTTP_PORT}"
DEFAULT_GRPC_URL = f"{LOOPBACK}:{GRPC_PORT}"
DEFAULT_METRICS_URL = f"http://{LOOPBACK}:{METRICS_PORT}/metrics"

# The `embed` ensemble: texts in, embeddings out.
TEXT_INPUT = "TEXT"
EMBEDDING_OUTPUT = "EMBEDDING"
# The encoder (the ONNX graph of export/onnx_graph.py): token ids and mask in.
TOKEN_INPUTS = ("INPUT_IDS", "ATTENTION_MASK")
INPUT_IDS, ATTENTION_MASK = TOKEN_INPUTS


def grpc_url_beside(http_url: str) -> str:
    """The gRPC host:port of the server at `http_url`, assuming Triton's default gRPC port."""
    return f"{http_url.rsplit(':', 1)[0]}:{GRPC_PORT}"


# The generative model's folder in the model repository (model_repository/llm, the `llm` package).
LLM_MODEL = "llm"
