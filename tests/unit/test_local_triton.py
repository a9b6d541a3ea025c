"""Launcher behaviour that needs no running server: pre-flight errors and the command line."""

from __future__ import annotations

import socket

import pytest

from tools.ports import free_ports, port_in_use
from tools.serve.local_triton import LocalTriton, ServerOptions, TritonInstallation, TritonStartError, build_command


def test_a_listening_port_is_reported_in_use() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert port_in_use("127.0.0.1", listener.getsockname()[1])


def test_a_closed_port_is_free() -> None:
    (port,) = free_ports(1)
    assert not port_in_use("127.0.0.1", port)


def test_taken_port_fails_before_starting_with_its_name() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        http, metrics = free_ports(2)
        options = ServerOptions(http_port=http, grpc_port=listener.getsockname()[1], metrics_port=metrics)
        with pytest.raises(TritonStartError, match=r"gRPC port \d+ on 127\.0\.0\.1 is already in use"):
            LocalTriton(options).preflight()


def test_unexported_repository_fails_with_make_export_hint(tmp_path) -> None:
    model = tmp_path / "encoder"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('name: "encoder" platform: "onnxruntime_onnx" max_batch_size: 4')
    with pytest.raises(TritonStartError, match=r"missing encoder/1/model\.onnx.*make export"):
        LocalTriton(ServerOptions(model_repository=tmp_path)).preflight()


def test_server_binds_loopback_and_triton_ports_by_default() -> None:
    options = ServerOptions()
    assert (options.host, options.http_port, options.grpc_port, options.metrics_port) == ("127.0.0.1", 8000, 8001, 8002)
    command = build_command(options, TritonInstallation.find(), backends=options.work_dir)
    for flag in ("--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"):
        assert flag in command


def test_wheel_has_a_stub_for_this_python() -> None:
    assert TritonInstallation.find().python_stub().is_file()
