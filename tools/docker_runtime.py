"""The Docker runtime: NGC Triton + Prometheus + Grafana from docker/compose.yaml.

`python -m tools.serve --runtime docker` starts the stack detached (after generating the
GPU model repository) and waits for Triton's readiness; `python -m tools.docker_runtime
down` (`make stop`) stops it. Whether Docker can be used at all is decided by asking the
engine, not by finding the `docker` client: a client without an engine is common.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tools.local_triton import ServerOptions
from tools.logsetup import add_verbosity_flags, configure_logging
from tools.paths import REPO_ROOT
from tools.variant import DEFAULT_OUT, write_variant

log = logging.getLogger("docker")

COMPOSE_FILE = REPO_ROOT / "docker" / "compose.yaml"
GATEWAY_COMPOSE_FILE = REPO_ROOT / "docker" / "compose.gateway.yaml"  # the OpenAI-compatible gateway, an override
PROJECT_NAME = "triton-embed"


class DockerUnavailable(RuntimeError):
    """No Docker engine (or no compose) here; the message says what was tried."""


def engine_problem(timeout_s: float = 5.0) -> str | None:
    """None when a Docker engine answers, else why not (one line)."""
    if shutil.which("docker") is None:
        return "the docker client is not installed"
    try:
        result = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return f"`docker info` did not answer within {timeout_s:.0f} s"
    if result.returncode != 0 or not result.stdout.strip():
        detail = (result.stderr.strip().splitlines() or ["no answer"])[-1]
        return f"no Docker engine answers ({detail})"
    return None


def compose_command() -> list[str]:
    """`docker compose` (the v2 plugin) when present, else the standalone `docker-compose`."""
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True, check=False).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise DockerUnavailable("neither `docker compose` nor `docker-compose` is installed")


def compose_environment(options: ServerOptions, model_repository: Path) -> dict[str, str]:
    """The variables docker/compose.yaml reads: ports, bind address, the repository to mount."""
    env = dict(os.environ)
    env.update(
        TRITON_MODEL_REPOSITORY=str(model_repository.resolve()),
        TRITON_BIND=options.host,
        TRITON_HTTP_PORT=str(options.http_port),
        TRITON_GRPC_PORT=str(options.grpc_port),
        TRITON_METRICS_PORT=str(options.metrics_port),
    )
    return env


def compose(args: list[str], env: dict[str, str] | None = None, check: bool = True, gateway: bool = True) -> subprocess.CompletedProcess:
    files = [COMPOSE_FILE, GATEWAY_COMPOSE_FILE] if gateway else [COMPOSE_FILE]
    command = [*compose_command(), "-p", PROJECT_NAME, *(part for path in files for part in ("-f", str(path))), *args]
    log.debug("running %s", " ".join(command))
    return subprocess.run(command, env=env, check=check, cwd=COMPOSE_FILE.parent)


def wait_ready(options: ServerOptions, timeout_s: float) -> bool:
    url = f"http://{options.http_url}/v2/health/ready"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(1.0)
    return False


def serve_docker(options: ServerOptions, ready_timeout_s: float, kind: str = "gpu", gateway_port: int | None = None) -> int:
    """Generate the variant, start the stack detached, wait for Triton; 0 when ready.
    With a gateway port, the OpenAI-compatible gateway runs too (docker/compose.gateway.yaml)."""
    problem = engine_problem()
    if problem:
        raise DockerUnavailable(f"the Docker runtime needs a Docker engine: {problem}; use --runtime local")
    repository = DEFAULT_OUT[kind]
    write_variant(kind, repository, options.model_repository)
    log.info("generated the %s model repository %s", kind, repository)
    env = compose_environment(options, repository)
    if gateway_port is not None:
        env["GATEWAY_PORT"] = str(gateway_port)
    log.info("starting NGC Triton, Prometheus and Grafana (docker/compose.yaml; first start pulls the images)")
    compose(["up", "-d", "--build", "--remove-orphans"], env=env, gateway=gateway_port is not None)
    if not wait_ready(options, ready_timeout_s):
        compose(["logs", "--tail", "40", "triton"], env=env, check=False)
        log.error("Triton in Docker was not ready after %.0f s (its log is above); `make stop` stops the stack", ready_timeout_s)
        return 1
    log.info("Triton (Docker, GPU) is ready; `make stop` stops it:")
    log.info("  HTTP     http://%s   (try: curl %s/v2/models/embed/ready)", options.http_url, options.http_url)
    log.info("  gRPC     %s", options.grpc_url)
    log.info("  metrics  %s", options.metrics_url)
    if gateway_port is not None:
        log.info("  OpenAI   http://%s:%d/v1   (the gateway; ready once Triton is)", options.host, gateway_port)
    log.info("  Prometheus http://%s:9090   Grafana http://%s:3000 (dashboard 'Triton dynamic batching')", options.host, options.host)
    return 0


def stop() -> int:
    problem = engine_problem()
    if problem:
        log.info("nothing to stop in Docker (%s); a local Triton stops with Ctrl-C in its terminal", problem)
        return 0
    compose(["down"], env=compose_environment(ServerOptions(), DEFAULT_OUT["gpu"]))
    log.info("stopped the %s stack", PROJECT_NAME)
    return 0


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.docker_runtime", description=__doc__)
    parser.add_argument("action", choices=("down", "status"), help="down: stop the stack; status: does a Docker engine answer?")
    add_verbosity_flags(parser)
    args = parser.parse_args(argv)
    configure_logging(args)
    try:
        if args.action == "down":
            return stop()
        problem = engine_problem()
        log.info("Docker engine: %s", problem or "answers")
        return 0 if problem is None else 1
    except (DockerUnavailable, subprocess.CalledProcessError) as exc:
        log.error("%s", exc)
        return 1


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
