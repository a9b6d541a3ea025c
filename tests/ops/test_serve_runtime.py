"""Runtime choice in `python -m tools.serve`: Docker only when an engine answers."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tools.docker_runtime import engine_problem
from tools.paths import REPO_ROOT


def serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.serve", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)


def test_docker_runtime_without_an_engine_says_why_and_exits_non_zero() -> None:
    problem = engine_problem()
    if problem is None:
        pytest.skip("a Docker engine answers on this host; `--runtime docker` would really start the stack")
    result = serve("--runtime", "docker")
    assert result.returncode == 2
    assert "needs a Docker engine" in result.stderr and "--runtime local" in result.stderr


def test_auto_runtime_logs_its_choice_in_one_line() -> None:
    """With the HTTP port taken, the local runtime fails at once; the choice is logged before."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = serve("--runtime", "auto", "--http-port", str(port))
    choice = [line for line in result.stderr.splitlines() if "runtime:" in line]
    assert len(choice) == 1
    expected = "runtime: local" if engine_problem() else "runtime: docker"
    assert expected in choice[0]
    if engine_problem():
        assert result.returncode == 1 and "already in use" in result.stderr
