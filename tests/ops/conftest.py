"""Shared helpers for the operations tests (docker/, monitoring/, deploy/)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools.paths import REPO_ROOT

DOCKER_DIR = REPO_ROOT / "docker"
MONITORING_DIR = REPO_ROOT / "monitoring"
K8S_DIR = REPO_ROOT / "deploy" / "k8s"


def venv_tool(name: str) -> str:
    """A console script installed next to this interpreter (hadolint, kubernetes-validate)."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        pytest.fail(f"{name} is not installed in the project venv; run `make venv` (it is in requirements.txt)")
    return str(path)


def system_tool(name: str, package: str) -> str:
    """A Debian-packaged tool; skips with the reason when it could not be installed."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (Debian package {package}; `make ops-deps` installs it where apt-get works)")
    return path


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, **kwargs)
