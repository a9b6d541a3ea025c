"""The LLM's knobs, read from the model config's `parameters`: one key per field of the engine's
settings dataclasses, same name, so the config file is their one source of truth.

Which settings apply depends on `parameters.engine`: `native` (our engine: SchedulerConfig and
EngineConfig, `config.pbtxt`) or `vllm` (vLLM's V1 engine: llm.vllm_engine.knobs.VllmKnobs,
`configs/vllm.pbtxt`). Triton hands initialize() the config as JSON (`{"parameters": {"mode":
{"string_value": "iteration"}}}`); tools read the committed file through the protobuf schema.
Both reduce to a mapping of key to string, parsed here once. An unknown key is refused (a typo
must not silently fall back to a default), and so is a value outside its field's choices.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Mapping
from pathlib import Path

from llm.contract import EngineConfig, SchedulerConfig

ENGINE_KEY = "engine"
ENGINES = ("native", "vllm")
# Parameters that Triton's Python backend reads itself (the stub's environment), not knobs of ours.
BACKEND_KEYS = frozenset({"EXECUTION_ENV_PATH"})

CHOICES: dict[str, tuple[str, ...]] = {
    "mode": ("iteration", "request", "none"),
    "policy": ("fcfs", "priority"),
    "device": ("cpu", "cuda"),
    "dtype": ("float32", "bfloat16", "float16", "auto"),
    "weights": ("dense", "int8", "int4"),
    "attention": ("auto", "paged", "padded"),
    "dense_kernel": ("auto", "amx", "onednn"),
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


def _convert(key: str, text: str, kind: type, choices: Mapping[str, tuple[str, ...]], zero_allowed: frozenset[str]) -> object:
    if kind is bool:
        value = BOOLEANS.get(text.strip().lower())
        if value is None:
            raise KnobError(f"parameter {key}={text!r}: choose true or false")
        return value
    if kind is str:
        value: object = text.strip()
        if key in choices and value not in choices[key]:
            raise KnobError(f"parameter {key}={text!r}: choose one of {', '.join(choices[key])}")
        return value
    try:
        value = kind(text)
    except ValueError:
        raise KnobError(f"parameter {key}={text!r} is not {'an integer' if kind is int else 'a number'}") from None
    if value < 0 or (value == 0 and key not in zero_allowed):
        raise KnobError(f"parameter {key}={text!r} must be {'>= 0' if key in zero_allowed else '> 0'}")
    return value


def engine_of(parameters: Mapping[str, str]) -> str:
    """Which engine a config's parameters ask for (`native` when the key is absent)."""
    engine = parameters.get(ENGINE_KEY, "native").strip() or "native"
    if engine not in ENGINES:
        raise KnobError(f"parameter {ENGINE_KEY}={engine!r}: choose one of {', '.join(ENGINES)}")
    return engine


def parse_settings(
    parameters: Mapping[str, str],
    classes: typing.Sequence[type],
    choices: Mapping[str, tuple[str, ...]],
    zero_allowed: frozenset[str],
) -> list[object]:
    """One instance per dataclass of `classes` from key -> string value (missing keys keep the
    dataclass default); the engine key and the backend's own keys are not knobs."""
    known = {name: kind for cls in classes for name, kind in _fields(cls).items()}
    given = {key: text for key, text in parameters.items() if key != ENGINE_KEY and key not in BACKEND_KEYS}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise KnobError(f"unknown parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    values = {key: _convert(key, text, known[key], choices, zero_allowed) for key, text in given.items()}
    return [cls(**{key: value for key, value in values.items() if key in _fields(cls)}) for cls in classes]


def parse_knobs(parameters: Mapping[str, str]) -> tuple[SchedulerConfig, EngineConfig]:
    """The native engine's (SchedulerConfig, EngineConfig); a vLLM config is refused by name."""
    if engine_of(parameters) != "native":
        raise KnobError(f"these parameters are for the {engine_of(parameters)} engine, not the native one")
    scheduler, engine = parse_settings(parameters, (SchedulerConfig, EngineConfig), CHOICES, ZERO_ALLOWED)
    if engine.weights != "dense" and engine.device != "cpu":
        raise KnobError(
            f"parameter weights={engine.weights!r} runs on the CPU only (torch's weight-only kernels): use weights dense on {engine.device}"
        )
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


def as_parameters(*settings: object) -> dict[str, str]:
    """The inverse of parse_settings: every field as the string a config parameter holds."""
    return {
        key: str(value).lower() if isinstance(value, bool) else str(value)
        for config in settings
        for key, value in dataclasses.asdict(config).items()
    }


def knobs_to_parameters(scheduler: SchedulerConfig, engine: EngineConfig) -> dict[str, str]:
    """The inverse of parse_knobs."""
    return as_parameters(scheduler, engine)
