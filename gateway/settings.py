"""The gateway's settings: one typed object built at the entry point, read everywhere below.

API keys come from a file (one per line, mode 0600) or from `$GATEWAY_API_KEYS`
(comma-separated), never from the command line, where `ps` would show them.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Collection
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
# Header value -> the LLM's `sampling_parameters.priority` (vLLM's convention: lower is served
# first, 0 is every other client's default), so bulk competes as a direct Triton client does.
LLM_PRIORITIES = {"interactive": -1, "bulk": 0}


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
    api_key_file: Path | None = None  # where api_keys were read (None: $GATEWAY_API_KEYS or no auth)
    api_keys: frozenset[str] = field(default_factory=frozenset, repr=False)
    llm_model: str = "llm"  # the Triton model behind /v1/completions and /v1/chat/completions ("": none)
    served_llm_name: str | None = None  # the `model` clients send for it; default: the Triton model's name
    llm_folder: Path = MODEL_REPOSITORY / "llm" / "1"  # the LLM's exported tokenizer files (its chat template)
    llm_timeout_s: float = 600.0  # a whole generation, first token to last
    llm_max_streams: int = 128  # generations open at once; more: 429 before Triton sees them

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser, prefix: str = "", skip: Collection[str] = ()) -> None:
        """Declare the options (the table OPTIONS) on `parser`; `prefix` namespaces them for a
        launcher (`tools.serve`: `--gateway-port`, `--gateway-api-key-file`, ...)."""
        defaults = cls()
        for option in OPTIONS:
            if option.flag not in skip:
                default = getattr(defaults, option.field)
                parser.add_argument(
                    f"--{prefix}{option.flag}", dest=option.dest(prefix), type=option.type, default=default, help=option.help
                )

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace, prefix: str = "", **given: object) -> GatewaySettings:
        """Checked settings from the options add_cli_args declared; `given` sets the ones a
        launcher skipped (the Triton URL, the host). API keys come from the file or the environment."""
        values = {o.field: getattr(args, o.dest(prefix)) for o in OPTIONS if hasattr(args, o.dest(prefix))}
        values.update(given)
        return cls(**values, api_keys=keys_from(values.get("api_key_file"))).validate()  # type: ignore[arg-type]

    def to_cli_args(self) -> list[str]:
        """The `python -m gateway` options that give a child these settings (defaults left
        out); keys travel as their file or in the environment, never on a command line."""
        defaults = GatewaySettings()
        argv = []
        for option in OPTIONS:
            value = getattr(self, option.field)
            if value is not None and value != getattr(defaults, option.field):
                argv += [f"--{option.flag}", str(value)]
        return argv

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.triton_model

    @property
    def llm_name(self) -> str:
        return self.served_llm_name or self.llm_model

    def validate(self) -> GatewaySettings:
        checks = (
            (self.max_inputs >= 1, f"--max-inputs must be at least 1, not {self.max_inputs}"),
            (self.max_body_bytes >= 1024, f"--max-body-bytes must be at least 1024, not {self.max_body_bytes}"),
            (self.request_timeout_s > 0, f"--timeout must be positive, not {self.request_timeout_s}"),
            (self.llm_max_streams >= 1, f"--llm-max-streams must be at least 1, not {self.llm_max_streams}"),
            (self.llm_timeout_s > 0, f"--llm-timeout must be positive, not {self.llm_timeout_s}"),
            (
                not self.llm_model or self.llm_name != self.model_name,
                f"the LLM and the embedding model are both served as {self.model_name!r}",
            ),
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


@dataclass(frozen=True)
class Option:
    """One command-line option of the gateway, declared once: `python -m gateway` and the
    launchers that start it (tools.serve, with a prefix) read the same table."""

    flag: str  # without the dashes
    field: str  # the GatewaySettings field it sets
    type: Callable[[str], object]
    help: str

    def dest(self, prefix: str = "") -> str:
        return f"{prefix}{self.flag}".replace("-", "_")


OPTIONS = (
    Option("triton-url", "triton_url", str, "Triton's gRPC host:port (default %(default)s)"),
    Option("triton-model", "triton_model", str, f"the Triton model to serve ({TEXT_INPUT} in, {EMBEDDING_OUTPUT} out)"),
    Option("served-model-name", "served_model_name", str, "the `model` name clients send (default: the Triton model's)"),
    Option("host", "host", str, "address to bind (default %(default)s; 0.0.0.0 exposes the gateway)"),
    Option("port", "port", int, "the gateway's port (default %(default)s)"),
    Option("tokenizer", "tokenizer_path", Path, "tokenizer.json used to count usage tokens"),
    Option("max-inputs", "max_inputs", int, "texts per request (more: 413)"),
    Option("max-body-bytes", "max_body_bytes", int, "request body size (more: 413)"),
    Option("timeout", "request_timeout_s", float, "seconds a request may take (then 504)"),
    Option("retry-after", "retry_after_s", int, "Retry-After seconds on 429/503"),
    Option("llm-model", "llm_model", str, "the Triton LLM behind /v1/completions and /v1/chat/completions ('': none)"),
    Option("served-llm-name", "served_llm_name", str, "the `model` name clients send for the LLM (default: the Triton model's)"),
    Option("llm-folder", "llm_folder", Path, "the LLM's exported folder (tokenizer files with the chat template)"),
    Option("llm-timeout", "llm_timeout_s", float, "seconds a generation may take (then 504, or an error event mid-stream)"),
    Option("llm-max-streams", "llm_max_streams", int, "LLM generations open at once (more: 429 with Retry-After)"),
    Option("api-key-file", "api_key_file", Path, f"file of accepted API keys (else ${KEYS_ENV}; none: no auth)"),
)
