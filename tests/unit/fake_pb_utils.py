"""A small stand-in for `triton_python_backend_utils`, the module Triton's Python backend
gives a model's stub: enough of it for our backends' `initialize()` and `execute()` to run
in-process, so their batching (padding, per-request errors, row splitting) is checked
deterministically, without a server or the timing of its dynamic batcher."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


class TritonModelException(Exception):
    """Raised by a model to fail its load."""


class TritonError:
    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = range(8)

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message, self._code = message, code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class Tensor:
    def __init__(self, name: str, array: np.ndarray) -> None:
        self._name, self._array = name, np.asarray(array)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class InferenceResponse:
    def __init__(self, output_tensors: list[Tensor] | None = None, error: TritonError | None = None) -> None:
        self._tensors, self._error = list(output_tensors or []), error

    def output_tensors(self) -> list[Tensor]:
        return self._tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def output(self, name: str) -> np.ndarray:
        """The named output's array (test convenience; fails on an error response)."""
        assert self._error is None, self._error.message()
        (tensor,) = [tensor for tensor in self._tensors if tensor.name() == name]
        return tensor.as_numpy()


@dataclass
class Request:
    """One inference request as execute() receives it: named input arrays, batch axis first."""

    inputs: dict[str, np.ndarray] = field(default_factory=dict)


def get_input_tensor_by_name(request: Request, name: str) -> Tensor | None:
    array = request.inputs.get(name)
    return None if array is None else Tensor(name, array)


def module() -> types.ModuleType:
    fake = types.ModuleType("triton_python_backend_utils")
    for item in (TritonModelException, TritonError, Tensor, InferenceResponse, get_input_tensor_by_name):
        setattr(fake, item.__name__, item)
    return fake


def load_model(path: Path, monkeypatch) -> types.ModuleType:
    """Import a backend's model.py (under a name of its own) with this fake injected."""
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", module())
    name = f"backend_under_test_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def initialize_args(config: dict, repository: Path, version: str = "1", kind: str = "CPU") -> dict:
    """The `args` Triton passes to initialize(): the config as JSON, where the model lives."""
    return {
        "model_config": json.dumps(config),
        "model_repository": str(repository),
        "model_version": version,
        "model_instance_kind": kind,
        "model_instance_device_id": "0",
    }
