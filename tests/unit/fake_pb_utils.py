"""A small stand-in for `triton_python_backend_utils`, the module Triton's Python backend
gives a model's stub: enough of it for our backends' `initialize()` and `execute()` to run
in-process, so their batching (padding, per-request errors, row splitting, responses sent
early through a request's response sender, custom metrics) is checked deterministically,
without a server or the timing of its dynamic batcher."""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

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


TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1

_send_order = itertools.count()  # one sequence over all senders: which response left first


class ResponseSender:
    """A request's sender in default (non-decoupled) mode: one final response, then closed."""

    def __init__(self, request: Request) -> None:
        self._request = request

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if self._request.sent and self._request.sent[-1][2] & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            raise RuntimeError("Unable to send response. Response sender has been closed.")
        if flags != TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            raise RuntimeError("a non-decoupled model sends exactly one response, flagged final")
        self._request.sent.append((next(_send_order), response, flags))


@dataclass
class Request:
    """One inference request as execute() receives it: named input arrays, batch axis first.
    `sent` records what went through its response sender: (send order, response, flags)."""

    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    sent: list[tuple[int, InferenceResponse | None, int]] = field(default_factory=list)

    def get_response_sender(self) -> ResponseSender:
        return ResponseSender(self)

    @property
    def response(self) -> InferenceResponse:
        """The one response sent through the sender (test convenience)."""
        (sent,) = self.sent
        return sent[1]


class Logger:
    """Triton's log, kept as (level, message) lines for tests to read."""

    lines: ClassVar[list[tuple[str, str]]] = []

    @classmethod
    def log_info(cls, message: str) -> None:
        cls.lines.append(("info", message))

    @classmethod
    def log_verbose(cls, message: str) -> None:
        cls.lines.append(("verbose", message))

    @classmethod
    def log_warn(cls, message: str) -> None:
        cls.lines.append(("warn", message))

    @classmethod
    def log_error(cls, message: str) -> None:
        cls.lines.append(("error", message))


class Metric:
    def __init__(self, family: MetricFamily, labels: dict[str, str], buckets: list[float] | None = None) -> None:
        self.family, self.labels, self._value = family, dict(labels), 0.0
        if (family.kind == MetricFamily.HISTOGRAM) != (buckets is not None):
            raise ValueError("a histogram, and only a histogram, takes buckets")
        self.buckets, self.observed = buckets, []

    def increment(self, value: float) -> None:
        if self.family.kind == MetricFamily.COUNTER and value < 0:
            raise ValueError("a counter only goes up")
        self._value += value

    def set(self, value: float) -> None:
        if self.family.kind == MetricFamily.COUNTER:
            raise ValueError("a counter cannot be set")
        self._value = value

    def observe(self, value: float) -> None:
        if self.family.kind != MetricFamily.HISTOGRAM:
            raise ValueError("only a histogram observes")
        self.observed.append(value)

    def value(self) -> float:
        return self._value


class MetricFamily:
    """Custom metrics; every family made through this fake is kept in `families` by name."""

    COUNTER, GAUGE, HISTOGRAM = range(3)
    families: ClassVar[dict[str, MetricFamily]] = {}

    def __init__(self, name: str, description: str, kind: int) -> None:
        self.name, self.description, self.kind = name, description, kind
        self.metrics: list[Metric] = []
        MetricFamily.families[name] = self

    def Metric(self, labels: dict[str, str] | None = None, buckets: list[float] | None = None) -> Metric:  # Triton's name
        metric = Metric(self, labels or {}, buckets)
        self.metrics.append(metric)
        return metric


def get_input_tensor_by_name(request: Request, name: str) -> Tensor | None:
    array = request.inputs.get(name)
    return None if array is None else Tensor(name, array)


def module() -> types.ModuleType:
    fake = types.ModuleType("triton_python_backend_utils")
    for item in (TritonModelException, TritonError, Tensor, InferenceResponse, get_input_tensor_by_name, Logger):
        setattr(fake, item.__name__, item)
    fake.TRITONSERVER_RESPONSE_COMPLETE_FINAL = TRITONSERVER_RESPONSE_COMPLETE_FINAL
    Logger.lines, MetricFamily.families = [], {}
    return fake


def with_metrics(fake: types.ModuleType) -> types.ModuleType:
    """The fake with custom metrics (`MetricFamily`): a Triton without them leaves it out."""
    fake.MetricFamily = MetricFamily
    return fake


def load_model(path: Path, monkeypatch, metrics: bool = False) -> types.ModuleType:
    """Import a backend's model.py (under a name of its own) with this fake injected and,
    as Triton's stub does, the model's folder on the import path for its sibling modules."""
    fake = module()
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", with_metrics(fake) if metrics else fake)
    monkeypatch.syspath_prepend(str(path.parent))
    name = f"backend_under_test_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def initialize_args(config: dict, repository: Path, version: str = "1", kind: str = "CPU") -> dict:
    """The `args` Triton passes to initialize(): the config as JSON, where the model lives."""
    return {
        "model_config": json.dumps(config),
        "model_name": config.get("name", repository.name),
        "model_repository": str(repository),
        "model_version": version,
        "model_instance_kind": kind,
        "model_instance_device_id": "0",
    }
