"""The Docker runtime: NGC Triton + Prometheus + Grafana from docker/compose.yaml.

`python -m tools.serve --runtime docker` generates the GPU model repository, runs
`compose up --build` attached (in the foreground, the project's convention for
`make serve`; with docker/compose.gateway.yaml, the OpenAI-compatible gateway, unless
--no-gateway) and, on Ctrl-C or SIGTERM, stops and removes the stack (`compose down`).
`python -m tools.serve.docker_runtime down` (`make stop`) removes a stack started otherwise.

Whether Docker can serve at all is decided by asking the host, not by finding the
`docker` client: a client without an engine is common, and so is an engine without
a GPU (a laptop), where compose fails with "could not select device driver nvidia".
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.paths import BUILD_DIR, REPO_ROOT
from tools.repo.variant import DEFAULT_OUT, write_variant
from tools.serve.admin_key import HEADER as ADMIN_HEADER
from tools.serve.admin_key import generate_key, read_key_file, write_key_file
from tools.serve.local_triton import ServerOptions
from tools.triton_client import TritonClient

log = logging.getLogger("docker")

COMPOSE_FILE = REPO_ROOT / "docker" / "compose.yaml"
GATEWAY_COMPOSE_FILE = REPO_ROOT / "docker" / "compose.gateway.yaml"  # the OpenAI-compatible gateway, an override
# Per GPU variant, the override that runs its container (vllm-gpu: NVIDIA's Triton vLLM image).
VARIANT_COMPOSE_FILES = {"vllm-gpu": REPO_ROOT / "docker" / "compose.vllm.yaml"}
PROJECT_NAME = "triton-embed"
# Kept across starts, so a tuner pointed at the stack can read it; git ignores build/.
ADMIN_KEY_FILE = BUILD_DIR / "docker" / "admin-key"
# Docker's own `nvidia` device driver (what compose's `driver: nvidia` reservation asks
# for) exists only when the daemon finds this hook of the NVIDIA Container Toolkit.
NVIDIA_HOOK = "nvidia-container-runtime-hook"


class DockerUnavailable(RuntimeError):
    """Docker cannot run the GPU stack here; the message says what was tried."""


def read_docker_info(timeout_s: float = 5.0) -> dict:
    """`docker info` as a dict; DockerUnavailable (one line) when no engine answers."""
    if shutil.which("docker") is None:
        raise DockerUnavailable("the docker client is not installed")
    try:
        result = subprocess.run(
            ["docker", "info", "--format", "{{json .}}"], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise DockerUnavailable(f"`docker info` did not answer within {timeout_s:.0f} s") from exc
    try:
        info = json.loads(result.stdout or "{}")
    except json.JSONDecodeError:
        info = {}
    if result.returncode != 0 or not info.get("ServerVersion"):
        detail = (result.stderr.strip().splitlines() or ["no answer"])[-1]
        raise DockerUnavailable(f"no Docker engine answers ({detail})")
    return info


def list_gpus(timeout_s: float = 15.0) -> list[str]:
    """`nvidia-smi -L`'s GPU lines; DockerUnavailable when the host has no usable GPU."""
    if shutil.which("nvidia-smi") is None:
        raise DockerUnavailable("nvidia-smi is not installed (no NVIDIA driver on this host)")
    try:
        result = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise DockerUnavailable(f"nvidia-smi did not answer within {timeout_s:.0f} s") from exc
    gpus = [line.strip() for line in result.stdout.splitlines() if line.startswith("GPU ")]
    if result.returncode != 0:
        detail = ((result.stderr or result.stdout).strip().splitlines() or ["no output"])[-1]
        raise DockerUnavailable(f"nvidia-smi failed ({detail})")
    if not gpus:
        raise DockerUnavailable("nvidia-smi lists no GPU")
    return gpus


@dataclass(frozen=True)
class HostProbes:
    """What decides whether the Docker runtime can work; the tests pass fakes."""

    docker_info: Callable[[], dict] = read_docker_info
    gpus: Callable[[], list[str]] = list_gpus
    which: Callable[[str], str | None] = field(default=shutil.which)


@dataclass(frozen=True)
class DockerCheck:
    usable: bool
    reason: str  # one line, for the log


def check_docker_gpu(probes: HostProbes | None = None) -> DockerCheck:
    """Usable when an engine answers, can hand a container an NVIDIA GPU (the `nvidia`
    runtime in `docker info`, or the toolkit's hook on this host), and nvidia-smi lists one."""
    probes = probes or HostProbes()
    try:
        info = probes.docker_info()
    except DockerUnavailable as exc:
        return DockerCheck(False, str(exc))
    runtimes = sorted(info.get("Runtimes") or {})
    if "nvidia" not in runtimes and probes.which(NVIDIA_HOOK) is None:
        cdi = info.get("CDISpecDirs") or []
        cdi_note = (
            f"; CDI is enabled ({', '.join(cdi)}), but compose's `driver: nvidia` GPU reservation needs the toolkit's hook" if cdi else ""
        )
        return DockerCheck(
            False,
            f"a Docker engine answers but has no NVIDIA runtime (runtimes: {', '.join(runtimes) or 'none'}; "
            f"the NVIDIA Container Toolkit is not set up){cdi_note}",
        )
    try:
        gpus = probes.gpus()
    except DockerUnavailable as exc:
        return DockerCheck(False, f"a Docker engine with the NVIDIA runtime answers, but {exc}")
    return DockerCheck(True, f"Docker {info.get('ServerVersion')} with the NVIDIA runtime, and nvidia-smi lists {gpus[0]}")


def engine_problem() -> str | None:
    """None when a Docker engine answers, else why not (one line)."""
    try:
        read_docker_info()
    except DockerUnavailable as exc:
        return str(exc)
    return None


def compose_command() -> list[str]:
    """`docker compose` (the v2 plugin) when present, else the standalone `docker-compose`."""
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True, check=False).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise DockerUnavailable("neither `docker compose` nor `docker-compose` is installed")


def docker_admin_key(options: ServerOptions) -> tuple[str, Path | None]:
    """The stack's model-control key: the one given (--admin-key-file, --admin-key,
    $TRITON_ADMIN_KEY), else the one kept in ADMIN_KEY_FILE (made on first use)."""
    if options.admin_key:
        return options.admin_key, None
    if ADMIN_KEY_FILE.exists():
        return read_key_file(ADMIN_KEY_FILE), ADMIN_KEY_FILE
    key = generate_key()
    write_key_file(ADMIN_KEY_FILE, key)
    return key, ADMIN_KEY_FILE


def compose_environment(options: ServerOptions, model_repository: Path, admin_key: str | None = None) -> dict[str, str]:
    """The variables docker/compose.yaml reads: the flags `tools.serve` honours for Docker."""
    env = dict(os.environ)
    env.update(
        TRITON_MODEL_REPOSITORY=str(model_repository.resolve()),
        TRITON_BIND=options.host,
        TRITON_HTTP_PORT=str(options.http_port),
        TRITON_GRPC_PORT=str(options.grpc_port),
        TRITON_METRICS_PORT=str(options.metrics_port),
        TRITON_CACHE_BYTES=str(options.cache_size_bytes),
        TRITON_EXIT_TIMEOUT_S=str(options.exit_timeout_s),
        TRITON_STOP_GRACE_PERIOD=f"{options.exit_timeout_s + 10}s",
        TRITON_LOG_VERBOSE=str(options.log_verbose),
        COMPOSE_MENU="false",  # compose v2's interactive menu would read the terminal
    )
    if admin_key:
        env["TRITON_ADMIN_KEY"] = admin_key
    return env


def compose_file_args(gateway: bool = True, kind: str = "gpu") -> list[str]:
    """`-f` for compose.yaml, for the gateway's override when it runs (or is stopped), and for
    the variant's own override last (it replaces Triton's image and repository)."""
    files = [COMPOSE_FILE, GATEWAY_COMPOSE_FILE] if gateway else [COMPOSE_FILE]
    files += [VARIANT_COMPOSE_FILES[kind]] if kind in VARIANT_COMPOSE_FILES else []
    return [part for path in files for part in ("-f", str(path))]


def compose(args: list[str], env: dict[str, str] | None = None, check: bool = True, gateway: bool = True) -> subprocess.CompletedProcess:
    command = [*compose_command(), "-p", PROJECT_NAME, *compose_file_args(gateway), *args]
    log.debug("running %s", " ".join(command))
    return subprocess.run(command, env=env, check=check, cwd=COMPOSE_FILE.parent)


def announce_when_ready(
    options: ServerOptions, ready_timeout_s: float, key_file: Path | None, stop: threading.Event, gateway_port: int | None = None
) -> None:
    """Log the endpoints once Triton's embed model is ready (the server alone is ready even
    with no model); warn once if that takes longer than the timeout, and keep waiting."""
    client = TritonClient(options.http_url)
    if not client.wait_until_ready(ready_timeout_s, model="embed", stop=stop):
        if stop.is_set():
            return
        log.warning(
            "Triton in Docker is not ready after %.0f s (the first start builds the image and pulls several GB; "
            "its log is above); still waiting, Ctrl-C stops",
            ready_timeout_s,
        )
        if not client.wait_until_ready(float("inf"), model="embed", stop=stop):
            return
    log.info("Triton (Docker, GPU) is ready; Ctrl-C stops the stack:")
    log.info("  HTTP     http://%s   (try: curl %s/v2/models/embed/ready)", options.http_url, options.http_url)
    log.info("  gRPC     %s", options.grpc_url)
    log.info("  metrics  %s", options.metrics_url)
    if gateway_port is not None:
        log.info("  OpenAI   http://%s:%d/v1   (the gateway; ready once Triton is)", options.host, gateway_port)
    log.info("  Prometheus http://%s:9090   Grafana http://%s:3000 (dashboard 'Triton dynamic batching')", options.host, options.host)
    where = key_file or "the key you passed"
    log.info("  model control: send header %r with the key in %s (tools.tune --url ... --admin-key-file %s)", ADMIN_HEADER, where, where)


def stop_attached(process: subprocess.Popen, grace_s: float) -> None:
    """One SIGINT makes an attached `compose up` stop its containers gracefully (a second
    would force it, which is why compose runs in its own session, away from the terminal)."""
    for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGTERM, 10.0)):
        if process.poll() is not None:
            return
        process.send_signal(sig)
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            log.warning("`compose up` did not stop within %.0f s of %s", wait_s, sig.name)
    process.kill()
    process.wait()


def serve_docker(options: ServerOptions, ready_timeout_s: float, kind: str = "gpu", gateway_port: int | None = None) -> int:
    """Run the stack in the foreground until Ctrl-C/SIGTERM (0), or until `compose up`
    ends on its own (its status). The caller turns SIGTERM into KeyboardInterrupt.
    With a gateway port, the OpenAI-compatible gateway runs too (docker/compose.gateway.yaml)."""
    base = [*compose_command(), "-p", PROJECT_NAME, *compose_file_args(gateway=gateway_port is not None, kind=kind)]
    repository = DEFAULT_OUT[kind]
    write_variant(kind, repository, options.model_repository)
    log.info("generated the %s model repository %s", kind, repository)
    key, key_file = docker_admin_key(options)
    env = compose_environment(options, repository, key)
    if gateway_port is not None:
        env["GATEWAY_PORT"] = str(gateway_port)
    # --remove-orphans: a gateway left by an earlier start goes when this one runs without it.
    up_command = [*base, "up", "--build", "--remove-orphans"]
    log.info(
        "starting NGC Triton, Prometheus and Grafana%s (docker/compose.yaml; the first start pulls the images)",
        " and the OpenAI-compatible gateway" if gateway_port is not None else "",
    )
    log.debug("running %s", " ".join(up_command))
    stop = threading.Event()
    process = subprocess.Popen(up_command, env=env, cwd=COMPOSE_FILE.parent, stdin=subprocess.DEVNULL, start_new_session=True)
    watcher = threading.Thread(target=announce_when_ready, args=(options, ready_timeout_s, key_file, stop, gateway_port), daemon=True)
    watcher.start()
    try:
        code = process.wait()
        if code:
            log.error("`compose up` exited with status %s (its output is above)", code)
            return code
        log.info("the stack stopped")
        return 0
    except KeyboardInterrupt:
        log.info("stopping the stack (Triton gets up to %d s for requests in flight)", options.exit_timeout_s)
        stop_attached(process, options.exit_timeout_s + 20.0)
        return 0
    finally:
        stop.set()
        if process.poll() is None:
            stop_attached(process, options.exit_timeout_s + 20.0)
        down = subprocess.run([*base, "down"], env=env, cwd=COMPOSE_FILE.parent, check=False)
        if down.returncode:
            log.error("`compose down` exited with status %s; `make stop` retries", down.returncode)
        else:
            log.info("removed the %s stack", PROJECT_NAME)


def stop() -> int:
    problem = engine_problem()
    if problem:
        log.info("nothing to stop in Docker (%s); a local Triton stops with Ctrl-C in its terminal", problem)
        return 0
    compose(["down"], env=compose_environment(ServerOptions(), DEFAULT_OUT["gpu"]))
    log.info("stopped the %s stack", PROJECT_NAME)
    return 0


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.serve.docker_runtime", description=__doc__)
    parser.add_argument(
        "action", choices=("down", "status"), help="down: stop the stack; status: can Docker serve here (engine, NVIDIA runtime, GPU)?"
    )
    add_verbosity_flags(parser)
    args = parser.parse_args(argv)
    configure_logging(args)
    try:
        if args.action == "down":
            return stop()
        check = check_docker_gpu()
        log.info("Docker runtime: %s (%s)", "usable" if check.usable else "not usable", check.reason)
        return 0 if check.usable else 1
    except (DockerUnavailable, subprocess.CalledProcessError) as exc:
        log.error("%s", exc)
        return 1


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
