"""The gateway's settings: one typed object built at the entry point, read everywhere below.

API keys come from a file (one per line, mode 0600) or from `$GATEWAY_API_KEYS`
(comma-separated), never from the command line, where `ps` would show them.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path

from tools.contract import DEFAULT_GRPC_URL, EMBEDDING_OUTPUT, TEXT_INPUT
from tools.paths import MODEL_REPOSITORY

KEYS_ENV = "GATEWAY_API_KEYS"
DEFAULT_PORT = 8080
PRIORITY_HEADER = "x-request-priority"
# Header value -> Triton request priority. 1 is the highest level of our configs; 0 lets
# Triton use the model's default level (bulk).
PRIORITIES = {"interactive": 1, "bulk": 0}


class SettingsError(ValueError):
    """A setting that cannot work (the message names it)."""


@dataclass(frozen=True)
class GatewaySettings:
    triton_url: str = DEFAULT_GRPC_URL
    triton_model: str = "embed"
    served_model_name: str | None = None  # the `model` clients send; default: the Triton model's name
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    tokenizer_path: Path = MODEL_REPOSITORY / "tokenizer" / "1" / "tokenizer.json"
    max_inputs: int = 2048  # OpenAI's own limit per request
    max_body_bytes: int = 8 * 1024 * 1024
    request_timeout_s: float = 30.0
    retry_after_s: int = 1
    api_keys: frozenset[str] = field(default_factory=frozenset, repr=False)

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.triton_model

    def validate(self) -> GatewaySettings:
        checks = (
            (self.max_inputs >= 1, f"--max-inputs must be at least 1, not {self.max_inputs}"),
            (self.max_body_bytes >= 1024, f"--max-body-bytes must be at least 1024, not {self.max_body_bytes}"),
            (self.request_timeout_s > 0, f"--timeout must be positive, not {self.request_timeout_s}"),
            (self.retry_after_s >= 0, f"--retry-after must not be negative, not {self.retry_after_s}"),
            (0 < self.port < 65536, f"--port must be 1-65535, not {self.port}"),
            (self.tokenizer_path.is_file(), f"tokenizer file {self.tokenizer_path} not found; run `make export` or pass --tokenizer"),
        )
        for ok, message in checks:
            if not ok:
                raise SettingsError(message)
        return self


def read_keys_file(path: Path) -> frozenset[str]:
    """One key per line ('#' comments allowed); refused when others may read the file."""
    try:
        mode = path.stat().st_mode & 0o777
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise SettingsError(f"cannot read the API key file {path}: {exc.strerror}") from exc
    if mode & 0o077:
        raise SettingsError(f"API key file {path} is readable by others (mode {mode:o}); chmod 600 it")
    keys = frozenset(line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#"))
    if not keys:
        raise SettingsError(f"API key file {path} holds no key")
    return keys


def keys_from(path: Path | None, environ: dict[str, str] | None = None) -> frozenset[str]:
    if path is not None:
        return read_keys_file(path)
    value = (environ if environ is not None else os.environ).get(KEYS_ENV, "")
    return frozenset(key.strip() for key in value.split(",") if key.strip())


def add_gateway_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = GatewaySettings()
    parser.add_argument("--triton-url", default=defaults.triton_url, help="Triton's gRPC host:port (default %(default)s)")
    parser.add_argument(
        "--triton-model", default=defaults.triton_model, help=f"the Triton model to serve ({TEXT_INPUT} in, {EMBEDDING_OUTPUT} out)"
    )
    parser.add_argument("--served-model-name", default=None, help="the `model` name clients send (default: the Triton model's)")
    parser.add_argument("--host", default=defaults.host, help="address to bind (default %(default)s; 0.0.0.0 exposes the gateway)")
    parser.add_argument("--port", type=int, default=defaults.port)
    parser.add_argument("--tokenizer", type=Path, default=defaults.tokenizer_path, help="tokenizer.json used to count usage tokens")
    parser.add_argument("--max-inputs", type=int, default=defaults.max_inputs, help="texts per request (more: 413)")
    parser.add_argument("--max-body-bytes", type=int, default=defaults.max_body_bytes, help="request body size (more: 413)")
    parser.add_argument("--timeout", type=float, default=defaults.request_timeout_s, help="seconds a request may take (then 504)")
    parser.add_argument("--retry-after", type=int, default=defaults.retry_after_s, help="Retry-After seconds on 429/503")
    parser.add_argument("--api-key-file", type=Path, default=None, help=f"file of accepted API keys (else ${KEYS_ENV}; none: no auth)")


def settings_from_args(args: argparse.Namespace) -> GatewaySettings:
    return GatewaySettings(
        triton_url=args.triton_url,
        triton_model=args.triton_model,
        served_model_name=args.served_model_name,
        host=args.host,
        port=args.port,
        tokenizer_path=args.tokenizer,
        max_inputs=args.max_inputs,
        max_body_bytes=args.max_body_bytes,
        request_timeout_s=args.timeout,
        retry_after_s=args.retry_after,
        api_keys=keys_from(args.api_key_file),
    ).validate()
