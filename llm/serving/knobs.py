"""The LLM's knobs, read from the model config's `parameters`: one key per field of
SchedulerConfig and EngineConfig, same name, so `config.pbtxt` is their one source of truth.

Triton hands initialize() the config as JSON (`{"parameters": {"mode": {"string_value":
"iteration"}}}`); tools read the committed file through the protobuf schema. Both reduce to
a mapping of key to string, parsed here once. An unknown key is refused (a typo must not
silently fall back to a default), and so is a value outside its field's choices.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Mapping
from pathlib import Path

from llm.contract import EngineConfig, SchedulerConfig

CHOICES: dict[str, tuple[str, ...]] = {
    "mode": ("iteration", "request", "none"),
    "policy": ("fcfs", "priority"),
    "device": ("cpu", "cuda"),
    "dtype": ("float32", "bfloat16", "float16"),
}
# Knobs that may be 0 (everything else numeric must be positive).
ZERO_ALLOWED = frozenset({"max_wait_ms", "num_threads"})


class KnobError(ValueError):
    """A config parameter is unknown or its value is invalid; the message names it."""


def _fields(cls: type) -> dict[str, type]:
    hints = typing.get_type_hints(cls)
    return {field.name: hints[field.name] for field in dataclasses.fields(cls)}


KNOWN = {**_fields(SchedulerConfig), **_fields(EngineConfig)}


BOOLEANS = {"true": True, "false": False}


def _convert(key: str, text: str, kind: type) -> object:
    if kind is bool:
        value = BOOLEANS.get(text.strip().lower())
        if value is None:
            raise KnobError(f"parameter {key}={text!r}: choose true or false")
        return value
    if kind is str:
        value: object = text.strip()
        if key in CHOICES and value not in CHOICES[key]:
            raise KnobError(f"parameter {key}={text!r}: choose one of {', '.join(CHOICES[key])}")
        return value
    try:
        value = kind(text)
    except ValueError:
        raise KnobError(f"parameter {key}={text!r} is not {'an integer' if kind is int else 'a number'}") from None
    if value < 0 or (value == 0 and key not in ZERO_ALLOWED):
        raise KnobError(f"parameter {key}={text!r} must be {'>= 0' if key in ZERO_ALLOWED else '> 0'}")
    return value


def parse_knobs(parameters: Mapping[str, str]) -> tuple[SchedulerConfig, EngineConfig]:
    """(SchedulerConfig, EngineConfig) from key -> string value; missing keys keep the
    dataclass default."""
    unknown = sorted(set(parameters) - set(KNOWN))
    if unknown:
        raise KnobError(f"unknown parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(KNOWN))}")
    values = {key: _convert(key, text, KNOWN[key]) for key, text in parameters.items()}
    scheduler = SchedulerConfig(**{key: value for key, value in values.items() if key in _fields(SchedulerConfig)})
    engine = EngineConfig(**{key: value for key, value in values.items() if key in _fields(EngineConfig)})
    return scheduler, engine


def parameters_from_json(model_config: str | Mapping) -> dict[str, str]:
    """The `parameters` of the JSON model config Triton passes to initialize()."""
    config = json.loads(model_config) if isinstance(model_config, str) else model_config
    return {key: value.get("string_value", "") for key, value in config.get("parameters", {}).items()}


def parameters_from_pbtxt(path: Path) -> dict[str, str]:
    """The `parameters` of a config.pbtxt, read through Triton's protobuf schema."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = text_format.Parse(Path(path).read_text(), model_config_pb2.ModelConfig())
    return {key: value.string_value for key, value in config.parameters.items()}


def knobs_to_parameters(scheduler: SchedulerConfig, engine: EngineConfig) -> dict[str, str]:
    """The inverse of parse_knobs: every knob as the string a config parameter holds."""
    return {
        key: str(value).lower() if isinstance(value, bool) else str(value)
        for config in (scheduler, engine)
        for key, value in dataclasses.asdict(config).items()
    }
