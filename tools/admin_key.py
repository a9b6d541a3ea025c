"""The key that guards Triton's model-control (repository) API.

With model control enabled, anyone who can reach the server could otherwise load,
unload or reconfigure models. Triton restricts chosen API groups to requests that
carry a header with an expected value (`--http-restricted-api` and
`--grpc-restricted-protocol`); this module makes that key (fresh per start, kept in
a file only its owner can read) and the matching flags and client headers.
"""

from __future__ import annotations

import argparse
import os
import secrets
from pathlib import Path

# gRPC metadata keys must be lower case; HTTP headers are case-insensitive.
HEADER = "triton-admin-key"
# Groups that change the server's state: models, and the trace/log settings.
RESTRICTED_APIS = ("model-repository", "trace", "logging")
ENV_VARIABLE = "TRITON_ADMIN_KEY"


class AdminKeyError(ValueError):
    """A key file that is missing, empty or readable by others."""


def generate_key() -> str:
    return secrets.token_urlsafe(32)


def write_key_file(path: Path, key: str) -> Path:
    """Create `path` with mode 0600 from the start (no window where others can read it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(key + "\n")
    return path


def read_key_file(path: Path) -> str:
    path = Path(path)
    try:
        mode = path.stat().st_mode & 0o777
        key = path.read_text().strip()
    except OSError as exc:
        raise AdminKeyError(f"cannot read the admin key file {path}: {exc.strerror}") from exc
    if mode & 0o077:
        raise AdminKeyError(f"admin key file {path} is readable by others (mode {mode:o}); chmod 600 it")
    if not key:
        raise AdminKeyError(f"admin key file {path} is empty")
    return key


def restricted_api_flags(key: str) -> list[str]:
    """tritonserver flags: the state-changing API groups need `HEADER: key` on HTTP and gRPC."""
    if not key or any(ch in key for ch in ",:= \n"):
        raise AdminKeyError("an admin key must be non-empty and hold no ',', ':', '=' or whitespace")
    groups = ",".join(RESTRICTED_APIS)
    return [f"--http-restricted-api={groups}:{HEADER}={key}", f"--grpc-restricted-protocol={groups}:{HEADER}={key}"]


def redact(command: list[str], key: str | None) -> list[str]:
    """The command line as it may be logged."""
    return [part.replace(key, "***") for part in command] if key else list(command)


def headers_for(key: str | None) -> dict[str, str] | None:
    return {HEADER: key} if key else None


def add_admin_key_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--admin-key-file",
        type=Path,
        default=None,
        help=f"file holding the key of a --url server's model-control API (mode 0600; or set ${ENV_VARIABLE})",
    )
    group.add_argument("--admin-key", default=None, help="the key itself (visible to other local users in `ps`; prefer the file)")


def key_from_args(args: argparse.Namespace) -> str | None:
    if getattr(args, "admin_key_file", None):
        return read_key_file(args.admin_key_file)
    return getattr(args, "admin_key", None) or os.environ.get(ENV_VARIABLE) or None
