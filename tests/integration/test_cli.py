"""The commands a user runs, as subprocesses: serve, embed and export."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tools.local_triton import free_ports
from tools.paths import REPO_ROOT

pytestmark = pytest.mark.integration


def run_module(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)


def wait_until_ready(port: int, process: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/embed/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    pytest.fail("tools.serve never became ready")


def test_serve_answers_then_stops_cleanly_on_sigterm() -> None:
    http, grpc, metrics = free_ports(3)
    ports = ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    process = subprocess.Popen(
        [sys.executable, "-m", "tools.serve", *ports, "--exit-timeout", "5"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until_ready(http, process)
        embedded = run_module("tools.embed", "--protocol", "grpc", "--url", f"127.0.0.1:{grpc}", "--json", "hello")
        assert embedded.returncode == 0, embedded.stderr
        assert len(json.loads(embedded.stdout)["embeddings"][0]) == 384
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        log = process.stderr.read()
        assert "Triton is ready" in log and "Triton stopped" in log
    finally:
        if process.poll() is None:
            process.kill()
    assert not any(socket.socket().connect_ex(("127.0.0.1", port)) == 0 for port in (http, grpc))


def test_serve_refuses_a_taken_port_with_a_clear_message() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        grpc, metrics = free_ports(2)
        result = run_module("tools.serve", "--http-port", str(taken), "--grpc-port", str(grpc), "--metrics-port", str(metrics))
    assert result.returncode == 1
    assert f"HTTP port {taken} on 127.0.0.1 is already in use" in result.stderr


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
