"""`make serve` on a host without an NVIDIA driver: one line explains Triton's CUDA messages."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_cli import LineCollector
from tools.paths import REPO_ROOT
from tools.ports import free_ports
from tools.serve.triton_console import EXPLANATION

pytestmark = pytest.mark.integration


def test_serve_prints_one_line_for_the_cuda_noise_and_keeps_the_rest() -> None:
    http, grpc, metrics = free_ports(3)
    ports = ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    process = subprocess.Popen(
        [sys.executable, "-m", "tools.serve", "--runtime", "local", *ports, "--exit-timeout", "20", "--no-gateway"],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    output = LineCollector(process.stderr)
    try:
        output.wait_for("Triton is ready", process)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=90) == 0
    finally:
        if process.poll() is None:
            process.kill()
    text = output.text()
    assert "successfully loaded 'embed'" in text and "Started HTTPService" in text, "Triton's own lines still show"
    explanation = EXPLANATION.decode().strip()
    if any(Path("/dev").glob("nvidia[0-9]*")):
        assert explanation not in text, "a GPU host: nothing is hidden"
    else:
        assert text.count(explanation) == 1
        assert "CudaDriverHelper" not in text and "CUDA driver version is insufficient" not in text
