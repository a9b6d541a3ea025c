"""`python -m tools.embed "some text" ...`: embeddings from the `embed` ensemble over HTTP or gRPC.

Texts come from the arguments, from files (`--file PATH`, one text per line) and from
standard input (`-`, one per line); blank lines are skipped. More texts than the model's
`max_batch_size` (asked from the server) go out as several requests, in order.

Examples:
  python -m tools.embed "Hello world" "今天天气很好。"
  python -m tools.embed --protocol grpc --priority 1 --json "an interactive query"
  cat texts.txt | python -m tools.embed --json - > embeddings.json
"""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import logging
import numbers
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tritonclient.utils import InferenceServerException

from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.contract import DEFAULT_GRPC_URL, DEFAULT_HTTP_URL, EMBEDDING_OUTPUT, TEXT_INPUT

log = logging.getLogger("embed")

DEFAULT_URLS = {"http": DEFAULT_HTTP_URL, "grpc": DEFAULT_GRPC_URL}


def client_module(protocol: str, aio: bool = False):
    """tritonclient's module for the protocol: blocking, or asyncio (`aio`, as the load driver uses)."""
    if protocol not in ("http", "grpc"):
        raise ValueError(f"unknown protocol {protocol!r}; use 'http' or 'grpc'")
    return importlib.import_module(f"tritonclient.{protocol}{'.aio' if aio else ''}")


def text_input(module, texts: list[str] | list[bytes], name: str = TEXT_INPUT):
    """A [n, 1] BYTES tensor, one text per row (the ensemble's batch axis)."""
    array = np.array([[t if isinstance(t, bytes) else t.encode("utf-8")] for t in texts], dtype=np.object_)
    tensor = module.InferInput(name, list(array.shape), "BYTES")
    tensor.set_data_from_numpy(array)
    return tensor


def check_priority(priority: int) -> int:
    """Triton takes an unsigned level (1 = highest, 0 = the model's default); a negative one
    fails deep in the client (gRPC: ValueError) or as a 500 (HTTP), so it is refused here."""
    if not isinstance(priority, numbers.Integral) or priority < 0:
        raise ValueError(f"priority must be a whole number >= 0 (1 = highest level, 0 = the model's default), not {priority!r}")
    return priority


@dataclass
class EmbeddingClient:
    """Thin wrapper over tritonclient for the `embed` ensemble (TEXT -> EMBEDDING).

    Use it as a context manager (or call close()). `embed()` splits a list longer than the
    model's `max_batch_size` into several requests and returns one array in order."""

    protocol: str = "http"
    url: str | None = None
    model: str = "embed"
    _max_batch_size: int | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.module = client_module(self.protocol)
        self.url = self.url or DEFAULT_URLS[self.protocol]
        self.client = self.module.InferenceServerClient(self.url)

    def max_batch_size(self) -> int:
        """The served model's `max_batch_size` (asked once; 0 means the model does not batch)."""
        if self._max_batch_size is None:
            config = self.client.get_model_config(self.model)
            # HTTP answers with the config as JSON, gRPC with a ModelConfigResponse.
            self._max_batch_size = int(config.get("max_batch_size", 0)) if isinstance(config, dict) else config.config.max_batch_size
        return self._max_batch_size

    def embed(self, texts: list[str] | list[bytes], priority: int = 0, timeout_us: int | None = None) -> np.ndarray:
        if not texts:
            raise ValueError("no texts given")
        check_priority(priority)
        size = len(texts)
        if size > 1:
            size = self.max_batch_size() or size
        parts = [self._infer(texts[start : start + size], priority, timeout_us) for start in range(0, len(texts), size)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _infer(self, texts: list[str] | list[bytes], priority: int, timeout_us: int | None) -> np.ndarray:
        result = self.client.infer(
            self.model,
            [text_input(self.module, texts)],
            outputs=[self.module.InferRequestedOutput(EMBEDDING_OUTPUT)],
            priority=priority,
            timeout=timeout_us,
        )
        return result.as_numpy(EMBEDDING_OUTPUT)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> EmbeddingClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def read_lines(lines: Iterable[str]) -> list[str]:
    """One text per line; line ends removed, blank lines skipped."""
    return [text for text in (line.rstrip("\r\n") for line in lines) if text.strip()]


def collect_texts(arguments: list[str], files: list[Path], stdin: Iterable[str]) -> list[str]:
    """Texts in the order given: arguments (`-` reads standard input there), then files."""
    texts: list[str] = []
    for argument in arguments:
        texts += read_lines(stdin) if argument == "-" else [argument]
    for path in files:
        try:
            texts += read_lines(path.read_text(encoding="utf-8").splitlines())
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read texts from {path}: {exc}") from exc
    return texts


def describe_failure(exc: Exception, protocol: str, url: str) -> str:
    """One line a user can act on: a server that is not there is named, with what to do."""
    refused = isinstance(exc, ConnectionRefusedError) or (isinstance(exc, OSError) and exc.errno == errno.ECONNREFUSED)
    if isinstance(exc, InferenceServerException):
        refused = "UNAVAILABLE" in str(exc.status()) and "connect" in (exc.message() or "").lower()
    where = f"http://{url}" if protocol == "http" else f"{url} (gRPC)"
    if refused:
        return f"no Triton answers at {where} (connection refused); start one with `make serve`, or pass --url host:port"
    if isinstance(exc, InferenceServerException):
        return f"{where} answered with an error: {exc.message() or exc}"
    return f"cannot reach {where}: {exc}"


def non_negative_int(text: str) -> int:
    try:
        return check_priority(int(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc) if "priority" in str(exc) else f"not a whole number: {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.embed", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("texts", nargs="*", help="texts to embed, one row each; '-' reads one text per line from standard input")
    parser.add_argument("--file", type=Path, action="append", default=[], help="read one text per line from this file (repeatable)")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--url", default=None, help=f"host:port (default {DEFAULT_HTTP_URL} for HTTP, {DEFAULT_GRPC_URL} for gRPC)")
    parser.add_argument("--model", default="embed")
    parser.add_argument("--priority", type=non_negative_int, default=0, help="1 = highest; 0 = the model's default level")
    parser.add_argument("--timeout-us", type=int, default=None, help="server-side queue timeout for this request")
    parser.add_argument("--json", action="store_true", help="print full embeddings as JSON")
    add_verbosity_flags(parser)
    return parser


def run(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args)
    if args.timeout_us is not None and args.timeout_us < 0:
        parser.error("--timeout-us must be >= 0")
    try:
        texts = collect_texts(args.texts, args.file, sys.stdin)
    except ValueError as exc:
        parser.error(str(exc))
    if not texts:
        parser.error("no texts: give them as arguments, with --file PATH, or on standard input with -")
    url = args.url or DEFAULT_URLS[args.protocol]
    try:
        with EmbeddingClient(args.protocol, url, args.model) as client:
            embeddings = client.embed(texts, priority=args.priority, timeout_us=args.timeout_us)
    except (InferenceServerException, ConnectionError, OSError) as exc:
        log.error("request failed: %s", describe_failure(exc, args.protocol, url))
        return 1
    if args.json:
        print(json.dumps({"model": args.model, "embeddings": embeddings.tolist()}))
        return 0
    for text, row in zip(texts, embeddings):
        preview = ", ".join(f"{value:+.4f}" for value in row[:4])
        print(f"{text[:40]!r:44} dim={row.size} norm={np.linalg.norm(row):.4f} [{preview}, ...]")
    return 0


def main() -> None:
    try:
        sys.exit(run())
    except BrokenPipeError:  # the reader went away (`| head`); Python's documented way out, without a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


if __name__ == "__main__":
    main()
