"""Runtime choice in `python -m tools.serve`: Docker only when Docker can use an NVIDIA GPU,
flags a runtime cannot honour refused, and the Docker runtime in the foreground.

The host probes (`docker info`, `nvidia-smi`) are faked: as functions for the decision,
and as executables on PATH for the command line, so the tests mean the same on a laptop,
a GPU host and CI. No Docker engine is needed."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.paths import REPO_ROOT
from tools.ports import free_ports
from tools.serve.__main__ import build_parser, choose_runtime, refused_flags
from tools.serve.docker_runtime import (
    GATEWAY_COMPOSE_FILE,
    DockerCheck,
    DockerUnavailable,
    HostProbes,
    check_docker_gpu,
    compose_environment,
    compose_file_args,
)
from tools.serve.local_triton import ServerOptions

GPU_LINE = "GPU 0: NVIDIA L4 (UUID: GPU-0b1f)"
NVIDIA_INFO = {
    "ServerVersion": "27.3.1",
    "Runtimes": {"runc": {}, "io.containerd.runc.v2": {}, "nvidia": {"path": "nvidia-container-runtime"}},
}
PLAIN_INFO = {"ServerVersion": "27.3.1", "Runtimes": {"runc": {}}, "CDISpecDirs": []}


def fail(message: str):
    def probe(*_args):
        raise DockerUnavailable(message)

    return probe


def probes(info=None, gpus=None, hook: str | None = None) -> HostProbes:
    return HostProbes(
        docker_info=(lambda: info) if isinstance(info, dict) else fail(info or "no Docker engine answers (Cannot connect)"),
        gpus=(lambda: gpus) if isinstance(gpus, list) else fail(gpus or "nvidia-smi is not installed (no NVIDIA driver on this host)"),
        which=lambda name: hook,
    )


# --- the decision -------------------------------------------------------------------------


def test_no_engine_means_no_docker_and_says_why() -> None:
    check = check_docker_gpu(probes(info="no Docker engine answers (Cannot connect to the Docker daemon)"))
    assert not check.usable and "Cannot connect to the Docker daemon" in check.reason


def test_a_laptop_engine_without_the_nvidia_runtime_is_not_usable() -> None:
    """A laptop's case: Docker Desktop answers, but compose would fail on `driver: nvidia`."""
    check = check_docker_gpu(probes(info=PLAIN_INFO, gpus=[GPU_LINE]))
    assert not check.usable
    assert "no NVIDIA runtime" in check.reason and "runc" in check.reason


def test_cdi_without_the_toolkit_hook_is_named_in_the_reason() -> None:
    info = dict(PLAIN_INFO, CDISpecDirs=["/etc/cdi", "/var/run/cdi"])
    check = check_docker_gpu(probes(info=info, gpus=[GPU_LINE]))
    assert not check.usable and "CDI is enabled (/etc/cdi, /var/run/cdi)" in check.reason


def test_the_nvidia_runtime_without_a_working_gpu_is_not_usable() -> None:
    check = check_docker_gpu(probes(info=NVIDIA_INFO, gpus="nvidia-smi failed (couldn't communicate with the NVIDIA driver)"))
    assert not check.usable and "nvidia-smi failed" in check.reason


def test_the_nvidia_runtime_and_a_listed_gpu_are_usable() -> None:
    check = check_docker_gpu(probes(info=NVIDIA_INFO, gpus=[GPU_LINE]))
    assert check.usable and GPU_LINE in check.reason and "27.3.1" in check.reason


def test_the_toolkit_hook_on_path_counts_when_no_runtime_is_registered() -> None:
    """Docker's `nvidia` device driver comes from the hook alone (`nvidia-ctk runtime configure` is optional)."""
    check = check_docker_gpu(probes(info=PLAIN_INFO, gpus=[GPU_LINE], hook="/usr/bin/nvidia-container-runtime-hook"))
    assert check.usable


def test_auto_takes_docker_only_when_usable_and_passes_the_reason_on() -> None:
    assert choose_runtime("auto", lambda: DockerCheck(False, "no GPU here")) == ("local", "no GPU here")
    assert choose_runtime("auto", lambda: DockerCheck(True, "Docker with a GPU")) == ("docker", "Docker with a GPU")


def test_docker_asked_for_where_it_cannot_work_is_refused_with_the_reason() -> None:
    with pytest.raises(DockerUnavailable, match=r"NVIDIA GPU: no NVIDIA runtime.*--runtime local"):
        choose_runtime("docker", lambda: DockerCheck(False, "no NVIDIA runtime"))


def test_local_asked_for_probes_nothing() -> None:
    def probe() -> DockerCheck:
        raise AssertionError("the local runtime must not probe Docker")

    assert choose_runtime("local", probe)[0] == "local"


# --- flags a runtime cannot honour ----------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--no-health-watch"], "--health-watch/--no-health-watch"),
        (["--health-watch"], "--health-watch/--no-health-watch"),
        (["--health-interval", "5"], "--health-interval"),
        (["--model-control-mode", "none"], "--model-control-mode"),
        (["--model-control-mode", "poll"], "--model-control-mode"),
        (["--gateway-api-key-file", "keys"], "--gateway-api-key-file"),
        (["--gateway-max-inputs", "8"], "--gateway-max-inputs"),
    ],
)
def test_docker_refuses_local_only_flags(flags: list[str], named: str) -> None:
    message = refused_flags(build_parser().parse_args(flags), "docker")
    assert message and f"the docker runtime cannot honour {named} (" in message


def test_docker_accepts_what_it_honours() -> None:
    args = build_parser().parse_args(
        [
            "--model-control-mode",
            "explicit",
            "--http-port",
            "9000",
            "--cache-size-mb",
            "16",
            "--exit-timeout",
            "5",
            "--gpu-variant",
            "tensorrt",
            "--gateway-port",
            "9090",
        ]
    )
    assert refused_flags(args, "docker") is None
    assert refused_flags(build_parser().parse_args(["--no-gateway"]), "docker") is None


def test_local_refuses_the_gpu_variant_and_accepts_its_own_flags() -> None:
    assert "--gpu-variant" in refused_flags(build_parser().parse_args(["--gpu-variant", "tensorrt"]), "local")
    assert refused_flags(build_parser().parse_args(["--no-health-watch", "--model-control-mode", "explicit"]), "local") is None


def test_compose_gets_every_flag_the_docker_runtime_honours() -> None:
    options = ServerOptions(host="0.0.0.0", http_port=9000, grpc_port=9001, metrics_port=9002, cache_size_bytes=1 << 24, exit_timeout_s=7)
    env = compose_environment(options, REPO_ROOT / "build" / "gpu_repository", admin_key="k3y")
    expected = {
        "TRITON_BIND": "0.0.0.0",
        "TRITON_HTTP_PORT": "9000",
        "TRITON_GRPC_PORT": "9001",
        "TRITON_METRICS_PORT": "9002",
        "TRITON_CACHE_BYTES": str(1 << 24),
        "TRITON_EXIT_TIMEOUT_S": "7",
        "TRITON_STOP_GRACE_PERIOD": "17s",
        "TRITON_ADMIN_KEY": "k3y",
    }
    assert {name: env[name] for name in expected} == expected


def test_the_gateways_compose_override_is_left_out_with_no_gateway() -> None:
    assert str(GATEWAY_COMPOSE_FILE) in compose_file_args(gateway=True)
    assert str(GATEWAY_COMPOSE_FILE) not in compose_file_args(gateway=False)


# --- the command line, with fake host tools on PATH ----------------------------------------

FAKE_DOCKER = """#!/bin/sh
case "$1" in
  info)
    if [ -n "$FAKE_DOCKER_INFO" ]; then printf '%s\\n' "$FAKE_DOCKER_INFO"; exit 0; fi
    echo "Cannot connect to the Docker daemon" >&2; exit 1 ;;
  *) exit 1 ;;
esac
"""
FAKE_NVIDIA_SMI = """#!/bin/sh
if [ -n "$FAKE_GPU" ]; then echo "$FAKE_GPU"; exit 0; fi
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"; exit 9
"""
# Records its arguments; `up` stays attached until SIGINT, like the real one.
FAKE_COMPOSE = """#!/bin/bash
echo "compose $*" >> "$FAKE_LOG"
case " $* " in
  *" up "*)
    env | grep -E '^(TRITON_ADMIN_KEY|TRITON_HTTP_PORT|GATEWAY_PORT)=' | sort >> "$FAKE_LOG"
    trap 'echo "up got SIGINT" >> "$FAKE_LOG"; exit 0' INT
    while true; do sleep 0.1; done ;;
esac
"""


@pytest.fixture()
def fake_host(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("docker", FAKE_DOCKER), ("nvidia-smi", FAKE_NVIDIA_SMI), ("docker-compose", FAKE_COMPOSE)):
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    env = {k: v for k, v in os.environ.items() if k not in ("FAKE_DOCKER_INFO", "FAKE_GPU", "TRITON_ADMIN_KEY")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", FAKE_LOG=str(tmp_path / "compose.log"))
    return env


def with_gpu(env: dict[str, str]) -> dict[str, str]:
    return dict(env, FAKE_DOCKER_INFO=json.dumps(NVIDIA_INFO), FAKE_GPU=GPU_LINE)


def serve(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.serve", *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)


def compose_log(env: dict[str, str]) -> str:
    path = Path(env["FAKE_LOG"])
    return path.read_text() if path.exists() else ""


def test_docker_without_an_engine_says_why_and_exits_2(fake_host: dict[str, str]) -> None:
    result = serve(fake_host, "--runtime", "docker")
    assert result.returncode == 2
    assert "Cannot connect to the Docker daemon" in result.stderr and "--runtime local" in result.stderr
    assert compose_log(fake_host) == ""


def test_auto_on_a_laptop_with_docker_but_no_gpu_serves_locally_and_says_why(fake_host: dict[str, str]) -> None:
    """With the HTTP port taken, the local runtime fails at once; the choice is logged before."""
    env = dict(fake_host, FAKE_DOCKER_INFO=json.dumps(PLAIN_INFO))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        result = serve(env, "--runtime", "auto", "--http-port", str(busy.getsockname()[1]))
    choice = [line for line in result.stderr.splitlines() if "runtime:" in line]
    assert len(choice) == 1 and "runtime: local (a Docker engine answers but has no NVIDIA runtime" in choice[0]
    assert result.returncode == 1 and "already in use" in result.stderr
    assert compose_log(env) == ""


def test_refused_flags_stop_the_docker_runtime_before_anything_starts(fake_host: dict[str, str]) -> None:
    result = serve(with_gpu(fake_host), "--runtime", "docker", "--no-health-watch", "--health-interval", "1")
    assert result.returncode == 2
    assert "cannot honour --health-watch/--no-health-watch, --health-interval" in result.stderr
    assert compose_log(fake_host) == ""


def test_auto_refuses_a_docker_only_flag_when_it_picks_local(fake_host: dict[str, str]) -> None:
    result = serve(fake_host, "--gpu-variant", "tensorrt")
    assert result.returncode == 2
    assert "runtime: local" in result.stderr and "local runtime cannot honour --gpu-variant" in result.stderr


def test_docker_runs_compose_attached_and_takes_the_stack_down_on_sigterm(fake_host: dict[str, str]) -> None:
    env = with_gpu(fake_host)
    http, grpc, metrics, gateway = free_ports(4)
    ports = ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics), "--gateway-port", str(gateway)]
    process = subprocess.Popen(
        [sys.executable, "-m", "tools.serve", "--runtime", "docker", "--admin-key", "k3y", *ports],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while "TRITON_ADMIN_KEY" not in compose_log(env):
            assert process.poll() is None, process.stdout.read()
            assert time.monotonic() < deadline, "compose up never started"
            time.sleep(0.2)
        time.sleep(0.5)
        assert process.poll() is None, "serve must stay in the foreground while compose runs"
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
    log = compose_log(env).splitlines()
    up = next(line for line in log if " up " in f"{line} ")
    assert " up --build" in up and " -d" not in up
    down = next(line for line in log if line.endswith(" down"))
    assert "compose.gateway.yaml" in up and "compose.gateway.yaml" in down, "the gateway's override comes up and goes down"
    assert "TRITON_ADMIN_KEY=k3y" in log and f"TRITON_HTTP_PORT={http}" in log and f"GATEWAY_PORT={gateway}" in log
    assert log.index("up got SIGINT") < next(i for i, line in enumerate(log) if line.endswith(" down")), log
    assert process.returncode == 0, output
