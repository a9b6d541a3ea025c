"""`python -m tools.serve`'s options for the gateway it starts beside Triton: gateway/settings.py
declares them once; here they carry the `--gateway-` prefix and are read back into
GatewaySettings, the gateway's one typed settings object."""

from __future__ import annotations

import argparse

from gateway.settings import OPTIONS, GatewaySettings, SettingsError
from tools.ports import port_in_use
from tools.serve.gateway_process import GatewayProcess, GatewayStartError

PREFIX = "gateway-"  # tools.serve's flags for the gateway: --gateway-port, --gateway-api-key-file, ...
SET_BY_SERVE = ("triton-url", "host")  # the gateway reaches the Triton serve started, and binds where Triton binds


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """`--gateway/--no-gateway` and the gateway's own options (gateway/settings.py declares
    them once; here they carry the `--gateway-` prefix)."""
    group = parser.add_argument_group("gateway (local runtime; Docker runs it as docker/compose.gateway.yaml says)")
    group.add_argument(
        "--gateway",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the OpenAI-compatible gateway (/v1/embeddings, /v1/completions, /v1/chat/completions); --no-gateway: Triton only",
    )
    GatewaySettings.add_cli_args(group, prefix=PREFIX, skip=SET_BY_SERVE)


def given_gateway_flags(args: argparse.Namespace) -> list[str]:
    """The --gateway-* flags set to something else than their default, but --gateway-port."""
    defaults = GatewaySettings()
    return [
        f"--{PREFIX}{option.flag}"
        for option in OPTIONS
        if option.flag not in (*SET_BY_SERVE, "port") and getattr(args, option.dest(PREFIX)) != getattr(defaults, option.field)
    ]


def gateway_from_args(args: argparse.Namespace, host: str, triton_grpc_port: int) -> GatewayProcess | None:
    """None with --no-gateway; refuses bad settings or a taken port before anything starts.
    The gateway binds where Triton binds and reaches Triton's gRPC port on loopback."""
    if not args.gateway:
        return None
    try:
        settings = GatewaySettings.from_cli_args(args, PREFIX, triton_url=f"127.0.0.1:{triton_grpc_port}", host=host)
    except SettingsError as exc:
        raise GatewayStartError(str(exc).replace("--", f"--{PREFIX}", 1)) from None
    if port_in_use(host, settings.port):
        raise GatewayStartError(f"gateway port {settings.port} on {host} is already in use; choose another with --gateway-port")
    return GatewayProcess.for_settings(settings)
