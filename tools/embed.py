"""`python -m tools.embed "some text" ...`: embeddings from the `embed` ensemble over HTTP or gRPC."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import dataclass

import numpy as np
from tritonclient.utils import InferenceServerException

from tools.logsetup import add_verbosity_flags, configure_logging

log = logging.getLogger("embed")

DEFAULT_URLS = {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001"}


def client_module(protocol: str):
    if protocol == "http":
        import tritonclient.http as module
    elif protocol == "grpc":
        import tritonclient.grpc as module
    else:
        raise ValueError(f"unknown protocol {protocol!r}; use 'http' or 'grpc'")
    return module


def text_input(module, texts: list[str] | list[bytes], name: str = "TEXT"):
    """A [n, 1] BYTES tensor, one text per row (the ensemble's batch axis)."""
    array = np.array([[t if isinstance(t, bytes) else t.encode("utf-8")] for t in texts], dtype=np.object_)
    tensor = module.InferInput(name, list(array.shape), "BYTES")
    tensor.set_data_from_numpy(array)
    return tensor


@dataclass
class EmbeddingClient:
    """Thin wrapper over tritonclient for the `embed` ensemble (TEXT -> EMBEDDING)."""

    protocol: str = "http"
    url: str | None = None
    model: str = "embed"

    def __post_init__(self) -> None:
        self.module = client_module(self.protocol)
        self.client = self.module.InferenceServerClient(self.url or DEFAULT_URLS[self.protocol])

    def embed(self, texts: list[str] | list[bytes], priority: int = 0, timeout_us: int | None = None) -> np.ndarray:
        if not texts:
            raise ValueError("no texts given")
        result = self.client.infer(
            self.model,
            [text_input(self.module, texts)],
            outputs=[self.module.InferRequestedOutput("EMBEDDING")],
            priority=priority,
            timeout=timeout_us,
        )
        return result.as_numpy("EMBEDDING")

    def close(self) -> None:
        self.client.close()


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.embed", description=__doc__)
    parser.add_argument("texts", nargs="+", help="texts to embed (one request, one row each)")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--url", default=None, help="host:port (default 127.0.0.1:8000 for HTTP, :8001 for gRPC)")
    parser.add_argument("--model", default="embed")
    parser.add_argument("--priority", type=int, default=0, help="1 = highest; 0 = the model's default level")
    parser.add_argument("--timeout-us", type=int, default=None, help="server-side queue timeout for this request")
    parser.add_argument("--json", action="store_true", help="print full embeddings as JSON")
    add_verbosity_flags(parser)
    args = parser.parse_args(argv)
    configure_logging(args)
    try:
        client = EmbeddingClient(args.protocol, args.url, args.model)
        embeddings = client.embed(args.texts, priority=args.priority, timeout_us=args.timeout_us)
    except (InferenceServerException, ConnectionError, OSError) as exc:
        log.error("request failed: %s", exc)
        return 1
    if args.json:
        print(json.dumps({"model": args.model, "embeddings": embeddings.tolist()}))
        return 0
    for text, row in zip(args.texts, embeddings):
        preview = ", ".join(f"{value:+.4f}" for value in row[:4])
        print(f"{text[:40]!r:44} dim={row.size} norm={np.linalg.norm(row):.4f} [{preview}, ...]")
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
