"""Servers for the reliability tests: one on a copy of the repository with small queues,
and one of the soak's own (the explicit-control server is the session's, tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import start_triton
from tools.reliability.overload import bounded_repository
from tools.serve.local_triton import LocalTriton


@pytest.fixture(scope="module")
def policy_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTriton]:
    """Queues of 16 per level at both steps; level 2 (default) honours per-request
    timeouts and times out after 1.5 s by default, level 1 ignores per-request timeouts."""
    directory = tmp_path_factory.mktemp("policy")
    repository = bounded_repository(directory / "repository", queue=16, level2_timeout_us=1_500_000)
    server = start_triton(directory / "triton.log", model_repository=repository)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def triton_for_soak(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalTriton]:
    """A server of its own: the soak reads the memory of its processes."""
    server = start_triton(tmp_path_factory.mktemp("soak") / "triton.log")
    try:
        yield server
    finally:
        server.stop()
