"""The commands a user runs, as subprocesses: serve, embed and export."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from tools.paths import REPO_ROOT
from tools.ports import free_ports

pytestmark = pytest.mark.integration


def run_module(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)


class LineCollector:
    """Reads a process's stderr in the background, so the test can wait for a log line."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self.thread = threading.Thread(target=lambda: self.lines.extend(stream), daemon=True)
        self.thread.start()

    def wait_for(self, text: str, process: subprocess.Popen, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(text in line for line in list(self.lines)):
            assert process.poll() is None, "".join(self.lines)
            assert time.monotonic() < deadline, f"no {text!r} after {timeout_s} s:\n{''.join(self.lines)}"
            time.sleep(0.2)

    def text(self) -> str:
        self.thread.join(timeout=10)
        return "".join(self.lines)


def test_serve_answers_then_stops_cleanly_on_sigterm() -> None:
    """Triton and the OpenAI-compatible gateway beside it; SIGTERM stops both."""
    http, grpc, metrics, gateway = free_ports(4)
    ports = ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics), "--gateway-port", str(gateway)]
    process = subprocess.Popen(
        [sys.executable, "-m", "tools.serve", *ports, "--exit-timeout", "5"],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = LineCollector(process.stderr)
    try:
        log.wait_for("gateway metrics", process)
        embedded = run_module("tools.embed", "--protocol", "grpc", "--url", f"127.0.0.1:{grpc}", "--json", "hello")
        assert embedded.returncode == 0, embedded.stderr
        assert len(json.loads(embedded.stdout)["embeddings"][0]) == 384
        request = urllib.request.Request(
            f"http://127.0.0.1:{gateway}/v1/embeddings", json.dumps({"model": "embed", "input": "hello"}).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.loads(response.read())
        assert answer["object"] == "list" and len(answer["data"][0]["embedding"]) == 384 and answer["usage"]["prompt_tokens"] == 3
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=90) == 0
        assert "Triton stopped (status 0)" in log.text()
    finally:
        if process.poll() is None:
            process.kill()
    assert not any(socket.socket().connect_ex(("127.0.0.1", port)) == 0 for port in (http, grpc, gateway))


def test_serve_refuses_a_taken_port_with_a_clear_message() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        grpc, metrics = free_ports(2)
        result = run_module(
            "tools.serve", "--http-port", str(taken), "--grpc-port", str(grpc), "--metrics-port", str(metrics), "--no-gateway"
        )
    assert result.returncode == 1
    assert f"HTTP port {taken} on 127.0.0.1 is already in use" in result.stderr


def test_serve_refuses_a_taken_gateway_port_before_starting_triton() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        http, grpc, metrics = free_ports(3)
        ports = ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics), "--gateway-port", str(taken)]
        result = run_module("tools.serve", "--runtime", "local", *ports)
    assert result.returncode == 1
    assert f"gateway port {taken} on 127.0.0.1 is already in use" in result.stderr
    assert "starting" not in result.stderr, "nothing was started"


def test_embed_cli_reports_an_unreachable_server_and_exits_non_zero() -> None:
    (port,) = free_ports(1)
    result = run_module("tools.embed", "--url", f"127.0.0.1:{port}", "hello")
    assert result.returncode == 1
    assert "request failed" in result.stderr


def test_export_is_a_no_op_when_up_to_date() -> None:
    result = run_module("export")
    assert result.returncode == 0, result.stderr
    assert "up to date" in result.stderr


def test_export_of_a_missing_model_folder_fails_with_its_name(tmp_path) -> None:
    result = run_module("export", "--model-dir", str(tmp_path / "absent"), "--repository", str(tmp_path))
    assert result.returncode == 2
    assert "does not exist" in result.stderr


def test_tensorrt_target_says_it_needs_a_gpu(tmp_path) -> None:
    result = run_module("export", "--target", "tensorrt")
    assert result.returncode == 2
    assert "GPU" in result.stderr


def test_export_writes_parity_checked_artifacts_and_redoes_damaged_ones(tmp_path) -> None:
    from tests.unit.test_repository_check import copy_configs

    copy_configs(tmp_path)
    first = run_module("export", "--repository", str(tmp_path), timeout=600)
    assert first.returncode == 0, first.stderr
    assert "parity ok" in first.stderr
    onnx_file = tmp_path / "encoder" / "1" / "model.onnx"
    assert onnx_file.stat().st_size > 1_000_000
    assert (tmp_path / "tokenizer" / "1" / "tokenizer.json").is_file()
    manifest = json.loads((tmp_path / "encoder" / "1" / "export_manifest.json").read_text())
    assert manifest["parity"]["min_cosine_vs_sentence_transformers"] >= 0.9999

    assert "up to date" in run_module("export", "--repository", str(tmp_path)).stderr
    onnx_file.write_bytes(onnx_file.read_bytes()[:1000])  # a truncated artifact
    again = run_module("export", "--repository", str(tmp_path), timeout=600)
    assert again.returncode == 0, again.stderr
    assert "encoder/1/model.onnx differs from what was exported" in again.stderr
    assert onnx_file.stat().st_size > 1_000_000
