"""`python -m export --target tensorrt` fails with the documented exit statuses, never a
traceback: 3 when the engine disagrees with ONNX Runtime, 2 when it cannot be built.
tensorrt and polygraphy are faked (no GPU here); ONNX Runtime runs the real exported graph."""

from __future__ import annotations

import logging
import sys
import types

import numpy as np
import pytest

import export.tensorrt_plan as engine
from export.cli import run
from export.errors import ExportError, ParityError
from tools.paths import MODEL_REPOSITORY
from tools.repo.model_config import load_config

ENCODER = load_config(MODEL_REPOSITORY / "encoder")
IDS, MASK = (tensor.name for tensor in ENCODER.input)
OUTPUT = ENCODER.output[0].name


class FakeRunner:
    """polygraphy's TrtRunner, answering every batch with the same vector."""

    def __init__(self, _engine: object) -> None:
        pass

    def __enter__(self) -> FakeRunner:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def infer(self, feed_dict: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = feed_dict[IDS].shape[0]
        vector = np.zeros((rows, 384), dtype=np.float32)
        vector[:, 0] = 1.0
        return {OUTPUT: vector}


@pytest.fixture
def gpu_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host that passes the GPU checks; one small batch for the parity check."""
    monkeypatch.setattr(engine, "gpu_problems", lambda: [])
    ids = np.array([[101, 7592, 2088, 102, 0, 0, 0, 0]], dtype=np.int64)
    monkeypatch.setattr(engine, "parity_batches", lambda *_: [(ids, (ids > 0).astype(np.int64))])
    polygraphy_trt = types.ModuleType("polygraphy.backend.trt")
    polygraphy_trt.EngineFromBytes = lambda plan: plan
    polygraphy_trt.TrtRunner = FakeRunner
    for name, module in (
        ("polygraphy", types.ModuleType("polygraphy")),
        ("polygraphy.backend", types.ModuleType("polygraphy.backend")),
        ("polygraphy.backend.trt", polygraphy_trt),
    ):
        monkeypatch.setitem(sys.modules, name, module)


def fake_tensorrt(parse_ok: bool = True, builder_error: Exception | None = None) -> types.ModuleType:
    """Just enough of the TensorRT 10 API for build_engine to reach its first failure."""

    class Parser:
        num_errors = 1

        def __init__(self, *_: object) -> None:
            pass

        def parse_from_file(self, _path: str) -> bool:
            return parse_ok

        def get_error(self, _index: int) -> str:
            return "In node 12 (Gather): unsupported INT64 indices"

    class Builder:
        def __init__(self, _logger: object) -> None:
            if builder_error:
                raise builder_error

        def create_network(self, _flags: int) -> object:
            return object()

    module = types.ModuleType("tensorrt")
    module.Logger = type("Logger", (), {"WARNING": 2, "__init__": lambda self, *_: None})
    module.Builder = Builder
    module.OnnxParser = Parser
    return module


def test_a_parity_failure_exits_3_with_the_cosine_and_writes_nothing(gpu_host, monkeypatch, caplog, tmp_path) -> None:
    monkeypatch.setattr(engine, "build_engine", lambda *_, **__: b"plan")
    monkeypatch.setattr(engine, "engine_input_types", lambda _plan: {IDS: "int64", MASK: "int64"})
    monkeypatch.setattr(engine, "DEFAULT_OUT", tmp_path / "tensorrt_repository")
    with caplog.at_level(logging.ERROR):
        assert run(["--target", "tensorrt"]) == 3
    assert "TensorRT engine disagrees with ONNX Runtime: min cosine" in caplog.text
    assert not (tmp_path / "tensorrt_repository").exists()


def test_check_parity_raises_the_exports_parity_error(gpu_host, monkeypatch) -> None:
    monkeypatch.setattr(engine, "engine_input_types", lambda _plan: {IDS: "int64", MASK: "int64"})
    batches = engine.parity_batches(None, 8, None)
    with pytest.raises(ParityError):  # the class export/cli.py maps to exit status 3
        engine.check_parity(b"plan", MODEL_REPOSITORY / "encoder" / "1" / "model.onnx", batches, (IDS, MASK, OUTPUT))


def test_an_unparsable_graph_exits_2_naming_tensorrts_error(gpu_host, monkeypatch, caplog) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", fake_tensorrt(parse_ok=False))
    with caplog.at_level(logging.ERROR):
        assert run(["--target", "tensorrt"]) == 2
    assert "TensorRT cannot parse" in caplog.text and "unsupported INT64 indices" in caplog.text


def test_an_error_inside_tensorrt_becomes_an_export_error_naming_the_step(gpu_host, monkeypatch, caplog) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", fake_tensorrt(builder_error=RuntimeError("CUDA initialization failure")))
    with pytest.raises(ExportError, match="building the TensorRT engine failed: RuntimeError: CUDA initialization failure"):
        engine.export_tensorrt(MODEL_REPOSITORY, "encoder", "tokenizer")
    with caplog.at_level(logging.ERROR):
        assert run(["--target", "tensorrt"]) == 2


def test_an_engine_with_other_input_types_is_an_export_error() -> None:
    with pytest.raises(ExportError, match="config declares TYPE_INT64"):
        engine.check_input_types(ENCODER, {IDS: "float32", MASK: "int64"})
