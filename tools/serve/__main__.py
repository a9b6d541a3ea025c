"""`python -m tools.serve`: run Triton on the model repository in the foreground until Ctrl-C.

Two runtimes, both in the foreground: local (the tritonserver binary from the
nvidia-pytriton wheel, CPU) and docker (docker/compose.yaml: NGC Triton on a GPU, plus
Prometheus and Grafana), the production path. The default, `auto`, takes Docker only
when Docker can give a container an NVIDIA GPU (an engine answers, it has the NVIDIA
runtime, nvidia-smi lists a GPU) and the local runtime otherwise, and logs which and why.
A flag the chosen runtime cannot honour is refused, never dropped. Beside Triton runs the
OpenAI-compatible gateway (gateway/, port 8080; docker/compose.gateway.yaml in Docker;
`--no-gateway` skips it). `--preset chat|bulk` serves a scenario preset's variant of the
repository (tools/repo/presets.py, written to build/presets/<name>/); the default, mixed, is the
repository itself.
"""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.paths import MODEL_REPOSITORY
from tools.repo.presets import DEFAULT_PRESET, PRESETS, PresetError, repository_for
from tools.repo.variant import VariantError
from tools.serve.admin_key import HEADER as ADMIN_HEADER
from tools.serve.admin_key import AdminKeyError, add_admin_key_arguments, resolve_admin_key
from tools.serve.cli_gateway import add_serve_arguments, gateway_from_args, given_gateway_flags
from tools.serve.docker_runtime import DockerCheck, DockerUnavailable, check_docker_gpu, serve_docker
from tools.serve.gateway_process import GatewayProcess, GatewayStartError, describe
from tools.serve.health_watch import HealthWatch, reload_model
from tools.serve.llm.engine import READY_TIMEOUT_S, add_llm_engine_argument, config_name_for
from tools.serve.local_triton import LocalTriton, ServerOptions, TritonStartError, describe_endpoints

log = logging.getLogger("serve")

HEALTH_INTERVAL_S = 2.0
# Flags only one runtime can honour (dest -> how the user wrote it). Docker runs Triton
# with explicit model control, compose's health check and restart policy, and the gateway
# with the options of docker/compose.gateway.yaml (--no-gateway and --gateway-port work on
# both runtimes); the local runtime serves the committed repository, not a GPU variant.
LOCAL_ONLY = {
    "model_control_mode": "--model-control-mode",
    "health_watch": "--health-watch/--no-health-watch",
    "health_interval": "--health-interval",
}
DOCKER_ONLY = {"gpu_variant": "--gpu-variant"}


def build_parser() -> argparse.ArgumentParser:
    defaults = ServerOptions()
    parser = argparse.ArgumentParser(prog="python -m tools.serve", description=__doc__)
    parser.add_argument(
        "--runtime",
        choices=("auto", "local", "docker"),
        default="auto",
        help="where Triton runs; auto: Docker when Docker can use an NVIDIA GPU here, otherwise local (default: %(default)s)",
    )
    parser.add_argument(
        "--gpu-variant",
        choices=("gpu", "tensorrt", "vllm-gpu"),
        default=None,
        help="docker runtime only: the generated repository to serve (default gpu; tensorrt needs `make export TARGET=tensorrt` first)",
    )
    parser.add_argument("--model-repository", type=Path, default=MODEL_REPOSITORY)
    parser.add_argument(
        "--preset",
        choices=tuple(PRESETS),
        default=DEFAULT_PRESET,
        help="scenario preset: chat (latency first), bulk (throughput first) or mixed (both, with priorities: the "
        "repository as it is); chat and bulk serve a variant written to build/presets/<name>/ (default: %(default)s)",
    )
    parser.add_argument("--host", default=defaults.host, help="address to bind (default %(default)s; 0.0.0.0 exposes the server)")
    parser.add_argument("--http-port", type=int, default=defaults.http_port)
    parser.add_argument("--grpc-port", type=int, default=defaults.grpc_port)
    parser.add_argument("--metrics-port", type=int, default=defaults.metrics_port)
    parser.add_argument(
        "--model-control-mode",
        choices=("none", "explicit", "poll"),
        default=None,
        help=f"'explicit' lets tools reload models with new batching settings (local default: {defaults.model_control_mode}; "
        "the docker runtime always runs explicit)",
    )
    parser.add_argument(
        "--cache-size-mb", type=int, default=defaults.cache_size_bytes // (1024 * 1024), help="response cache size (0: no cache)"
    )
    parser.add_argument("--exit-timeout", type=int, default=defaults.exit_timeout_s, help="seconds in-flight requests get on shutdown")
    add_llm_engine_argument(parser)
    parser.add_argument(
        "--ready-timeout",
        type=float,
        default=None,
        help="seconds to wait for the models to load (default 180; 900 with --llm-engine vllm: it compiles the model first)",
    )
    parser.add_argument("--log-verbose", type=int, default=0, help="Triton's own verbose log level")
    parser.add_argument(
        "--health-watch",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="local runtime only: bring back a model whose backend stub died (reload in explicit mode, else restart Triton; default on)",
    )
    parser.add_argument(
        "--health-interval",
        type=float,
        default=None,
        help=f"local runtime only: seconds between health checks (default {HEALTH_INTERVAL_S})",
    )
    add_admin_key_arguments(parser)
    add_serve_arguments(parser)
    add_verbosity_flags(parser)
    return parser


def choose_runtime(requested: str, check: Callable[[], DockerCheck] = check_docker_gpu) -> tuple[str, str]:
    """(runtime, why). `auto` asks `check` whether Docker can run the GPU stack here;
    `docker` asked for explicitly on a host where it cannot raises DockerUnavailable."""
    if requested == "local":
        return "local", "asked for"
    result = check()
    if requested == "docker":
        if not result.usable:
            raise DockerUnavailable(
                f"the Docker runtime needs a Docker engine that can give a container an NVIDIA GPU: {result.reason}; use --runtime local"
            )
        return "docker", "asked for"
    return ("docker" if result.usable else "local"), result.reason


def refused_flags(args: argparse.Namespace, runtime: str) -> str | None:
    """Why the given flags cannot run on `runtime`, or None. Only flags the user gave count
    (their defaults are None); `--model-control-mode explicit` is what Docker runs anyway."""
    if runtime == "docker":
        given = [flag for dest, flag in LOCAL_ONLY.items() if getattr(args, dest) is not None] + given_gateway_flags(args)
        if args.model_control_mode == "explicit":
            given.remove(LOCAL_ONLY["model_control_mode"])
        reason = (
            "Docker runs Triton with explicit model control, compose's health check and restart policy, "
            "and the gateway as docker/compose.gateway.yaml configures it"
        )
    else:
        given = [flag for dest, flag in DOCKER_ONLY.items() if getattr(args, dest) is not None]
        reason = "it chooses among the generated GPU repositories, which only the docker runtime serves"
    if not given:
        return None
    pronoun = "it" if len(given) == 1 else "them"
    return f"the {runtime} runtime cannot honour {', '.join(given)} ({reason}); drop {pronoun} or choose the other runtime"


def options_from_args(args: argparse.Namespace, runtime: str = "local") -> ServerOptions:
    mode = "explicit" if runtime == "docker" else args.model_control_mode or ServerOptions().model_control_mode
    explicit = mode == "explicit"
    return ServerOptions(
        model_repository=args.model_repository.resolve(),
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        model_control_mode=mode,
        load_models=("*",) if explicit else (),
        cache_size_bytes=args.cache_size_mb * 1024 * 1024,
        exit_timeout_s=args.exit_timeout,
        log_verbose=args.log_verbose,
        admin_key=resolve_admin_key(args.admin_key_file, args.admin_key) if explicit else None,
        model_config_name=config_name_for(args.llm_engine),
    )


def ready_timeout_of(args: argparse.Namespace) -> float:
    return args.ready_timeout if args.ready_timeout is not None else READY_TIMEOUT_S[args.llm_engine]


def start_watch(server: LocalTriton, interval_s: float, restart: threading.Event) -> HealthWatch:
    """Explicit mode: reload the model whose stub died. Otherwise: ask for a restart."""
    options = server.options
    client = server.client

    def recover(model: str) -> None:
        if options.model_control_enabled:
            reload_model(client, model, options.model_repository)
        else:
            log.error("no model control: restarting Triton to bring %s back", model)
            restart.set()

    return HealthWatch(server.pid, client, options.model_repository, interval_s, recover).start()


def serve_local(
    options: ServerOptions, ready_timeout_s: float, watch_interval_s: float | None = 2.0, gateway: GatewayProcess | None = None
) -> int:
    """Run until SIGTERM/Ctrl-C (exit 0) or until Triton exits on its own (non-zero).
    With a watch interval, a dead backend stub is recovered (see tools.serve.health_watch).
    With a gateway, it starts once Triton is ready and stops first (tools.serve.gateway_process)."""
    server = LocalTriton(options, log_path=None)
    restart = threading.Event()
    watch: HealthWatch | None = None

    try:
        server.start(ready_timeout_s)
        log.info("Triton is ready (Ctrl-C to stop):")
        for line in describe_endpoints(options):
            log.info("  %s", line)
        if server.admin_key_file:
            log.info("  model control: send header %r with the key in %s", ADMIN_HEADER, server.admin_key_file)
        if gateway:
            gateway.start()
            for line in describe(gateway):
                log.info("  %s", line)
        while True:
            if watch_interval_s and watch is None:
                watch = start_watch(server, watch_interval_s, restart)
            if server.process.poll() is not None:
                log.error("tritonserver exited on its own with status %s", server.process.returncode)
                return server.process.returncode or 1
            if gateway:
                gateway.restart_if_exited()
            if restart.wait(0.5):
                watch.stop()
                watch = None
                restart.clear()
                server.stop()
                server.start(ready_timeout_s)
                log.info("Triton restarted and ready")
    except KeyboardInterrupt:
        if watch:
            watch.stop()
        if gateway:
            gateway.stop()
        if server.process is None:  # the signal came during start-up; start() already stopped it
            log.info("Triton stopped during start-up")
            return 0
        log.info("stopping Triton (in-flight requests get up to %d s)", options.exit_timeout_s)
        if not server.drain(options.exit_timeout_s):
            log.warning("requests were still queued after %d s; stopping anyway", options.exit_timeout_s)
        code = server.stop()
        log.info("Triton stopped (status %s)", code)
        return 0
    finally:
        if watch:
            watch.stop()
        if gateway:
            gateway.stop()
        server.stop()


def request_stop(signum: int, _frame: object) -> None:
    """SIGTERM stops either runtime the way Ctrl-C does."""
    raise KeyboardInterrupt


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args)
    try:
        runtime, why = choose_runtime(args.runtime)
    except DockerUnavailable as exc:
        log.error("%s", exc)
        return 2
    if args.runtime == "auto":
        log.info("runtime: %s (%s)", runtime, why)
    refused = refused_flags(args, runtime)
    if refused:
        log.error("%s", refused)
        return 2
    try:
        args.model_repository = repository_for(args.preset, args.model_repository)
    except (PresetError, ValueError, OSError) as exc:
        log.error("%s", exc)
        return 1
    if args.preset != DEFAULT_PRESET:
        log.info("preset %s: serving %s", args.preset, args.model_repository)
    signal.signal(signal.SIGTERM, request_stop)
    try:
        if runtime == "docker":
            gateway_port = args.gateway_port if args.gateway else None
            return serve_docker(
                options_from_args(args, "docker"), ready_timeout_of(args), kind=args.gpu_variant or "gpu", gateway_port=gateway_port
            )
        interval = None if args.health_watch is False else args.health_interval or HEALTH_INTERVAL_S
        gateway = gateway_from_args(args, args.host, args.grpc_port)  # its port is checked before Triton starts
        return serve_local(options_from_args(args), ready_timeout_of(args), interval, gateway)
    except DockerUnavailable as exc:
        log.error("%s", exc)
        return 2
    except (TritonStartError, AdminKeyError, GatewayStartError, VariantError, subprocess.CalledProcessError) as exc:
        log.error("%s", exc)
        return 1
    except KeyboardInterrupt:
        log.info("stopped before the server started")
        return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
