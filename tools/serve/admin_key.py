"""The key that guards Triton's model-control (repository) API.

With model control enabled, anyone who can reach the server could otherwise load,
unload or reconfigure models (NVIDIA's secure deployment guide: a path to arbitrary code
execution). Triton restricts chosen API groups to requests that carry a header with an
expected value (`--http-restricted-api` and `--grpc-restricted-protocol`); this module
makes that key (kept in a file only its owner can read) and the matching flags and
client headers, for every runtime:

- local: `tools.serve.local_triton` adds `restricted_api_flags(key)` to its command line;
- Docker and Kubernetes: this file is also the image's entrypoint
  (`python3 admin_key.py exec tritonserver ...`, see docker/Dockerfile). It reads the key
  from $TRITON_ADMIN_KEY (compose passes it from the caller's environment, Kubernetes
  from a Secret), appends the same flags, and refuses to start Triton with model control
  but no key. It therefore imports nothing outside the standard library.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from collections.abc import Mapping, Sequence
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


def resolve_admin_key(key_file: Path | None = None, key: str | None = None) -> str | None:
    """The key a command uses: from --admin-key-file, else --admin-key, else $TRITON_ADMIN_KEY."""
    if key_file:
        return read_key_file(key_file)
    return key or os.environ.get(ENV_VARIABLE) or None


def model_control_requested(server_args: Sequence[str]) -> bool:
    """True when a tritonserver command line enables model control (explicit or poll)."""
    for index, arg in enumerate(server_args):
        if arg.startswith("--model-control-mode="):
            mode = arg.split("=", 1)[1]
        elif arg == "--model-control-mode" and index + 1 < len(server_args):
            mode = server_args[index + 1]
        else:
            continue
        if mode != "none":
            return True
    return False


def server_command(command: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """The container's tritonserver command: with a key in $TRITON_ADMIN_KEY, the
    restricted-API flags appended; with model control but no key, an AdminKeyError."""
    key = environ.get(ENV_VARIABLE, "").strip()
    if not key:
        if model_control_requested(command[1:]):
            raise AdminKeyError(
                f"model control is enabled but ${ENV_VARIABLE} is empty: refusing to start Triton with an open "
                "model-repository API (compose: export it, or let `make serve RUNTIME=docker` do it; "
                "Kubernetes: create the Secret triton-admin-key, see docker/README.md)"
            )
        return list(command)
    return [*command, *restricted_api_flags(key)]


def exec_server(command: Sequence[str]) -> None:
    """Replace this process with Triton (so it is PID 1 and gets the container's signals)."""
    full = server_command(command, os.environ)
    environment = {name: value for name, value in os.environ.items() if name != ENV_VARIABLE}
    groups = ",".join(RESTRICTED_APIS)
    state = f"{groups} need header {HEADER!r}" if len(full) > len(command) else "no model control, nothing restricted"
    print(f"admin_key: starting {command[0]} ({state})", file=sys.stderr, flush=True)
    os.execvpe(full[0], full, environment)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="admin_key.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", required=True)
    new = actions.add_parser("new", help="write a fresh key to FILE (mode 0600) and print the path")
    new.add_argument("file", type=Path)
    run = actions.add_parser("exec", help=f"run COMMAND with the restricted-API flags for ${ENV_VARIABLE} appended")
    run.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    try:
        if args.action == "new":
            print(write_key_file(args.file, generate_key()))
            return 0
        if not args.command:
            parser.error("exec needs a command, e.g. `exec tritonserver --model-repository=/models`")
        exec_server(args.command)
    except (AdminKeyError, OSError) as exc:
        print(f"admin_key: {exc}", file=sys.stderr)
        return 2
    return 0  # not reached: exec_server replaces the process


if __name__ == "__main__":
    sys.exit(main())
