"""One request's inputs (the names of Triton's vLLM backend) parsed into what the loop takes,
each problem refused with a message that names it.

Inputs: `text_input` (the prompt), optional `stream`, `sampling_parameters` (a JSON object
with vLLM's SamplingParams names), `exclude_input_in_output` and the `return_*` flags of the
vLLM backend's additional outputs. Semantics follow that backend: without `stream` a request
gets one response with the whole text; `exclude_input_in_output` defaults to False (the prompt
is prepended) unless streaming, where the prompt is never sent and asking for it is an error.
Without a `sampling_parameters` input the request's own parameters (Triton's request
parameters, JSON) are read instead, as the vLLM backend does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

from llm.contract import SamplingParams

RETURN_FLAGS = ("return_finish_reason", "return_num_input_tokens", "return_num_output_tokens")


class RequestError(ValueError):
    """The request is invalid; the message says which input and why (sent back as INVALID_ARG)."""


@dataclass(frozen=True)
class ParsedRequest:
    prompt: str
    params: SamplingParams
    stream: bool
    exclude_input_in_output: bool
    return_finish_reason: bool = False
    return_num_input_tokens: bool = False
    return_num_output_tokens: bool = False


def _number_from_text(value: object, kind: type) -> object:
    """A number sent as a string ("32", "0.7"), as GenAI-Perf's `--extra-inputs` sends them and
    Triton's vLLM backend accepts; anything else is returned unchanged for the type check."""
    if isinstance(value, str):
        try:
            return kind(value.strip())
        except ValueError:
            return value
    return value


def _check_int(key: str, value: object) -> int:
    value = _number_from_text(value, int)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"sampling_parameters.{key} must be an integer, got {json.dumps(value)}")
    return value


def _check_float(key: str, value: object) -> float:
    value = _number_from_text(value, float)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestError(f"sampling_parameters.{key} must be a finite number, got {json.dumps(value)}")
    return float(value)


def _check_bool(key: str, value: object) -> bool:
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise RequestError(f"sampling_parameters.{key} must be true or false, got {json.dumps(value)}")
    return value


def _check_stop(key: str, value: object) -> tuple[str, ...]:
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(item, str) and item for item in stops):
        raise RequestError(f"sampling_parameters.{key} must be a non-empty string or a list of them, got {json.dumps(value)}")
    return tuple(stops)


def _check_seed(key: str, value: object) -> int | None:
    return None if value is None else _check_int(key, value)


def _check_timeout(key: str, value: object) -> float | None:
    if value is None:
        return None
    timeout = _check_float(key, value)
    if timeout <= 0:
        raise RequestError(
            f"sampling_parameters.{key} must be > 0 (milliseconds a request may wait to be scheduled), got {json.dumps(value)}"
        )
    return timeout


def _check_lora_name(key: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise RequestError(f"sampling_parameters.{key} must be an adapter's name, got {json.dumps(value)}")
    return value


CHECKS = {
    "max_tokens": _check_int,
    "temperature": _check_float,
    "top_p": _check_float,
    "top_k": _check_int,
    "seed": _check_seed,
    "stop": _check_stop,
    "ignore_eos": _check_bool,
    "min_tokens": _check_int,
    "priority": _check_int,
    "queue_timeout_ms": _check_timeout,
    "lora_name": _check_lora_name,  # the adapter (model_repository/llm/1/multi_lora.json), as Triton's vLLM backend names it
}


def decode_utf8(name: str, data: bytes | str) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(f"{name} is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def parse_sampling_parameters(text: str | bytes | None, max_tokens_limit: int) -> SamplingParams:
    """SamplingParams from the JSON object; every key known, every value of its type and range."""
    if text is None:
        return SamplingParams()
    text = decode_utf8("sampling_parameters", text)
    if not text.strip():
        return SamplingParams()
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestError(f"sampling_parameters is not valid JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(raw, dict):
        raise RequestError(f"sampling_parameters must be a JSON object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(CHECKS))
    if unknown:
        raise RequestError(f"sampling_parameters has unknown key(s) {', '.join(unknown)}; known: {', '.join(CHECKS)}")
    values = {key: CHECKS[key](key, value) for key, value in raw.items()}
    params = SamplingParams(**values)
    if not 1 <= params.max_tokens <= max_tokens_limit:
        raise RequestError(f"sampling_parameters.max_tokens must be in [1, {max_tokens_limit}], got {params.max_tokens}")
    if params.temperature < 0:
        raise RequestError(f"sampling_parameters.temperature must be >= 0, got {params.temperature}")
    if not 0 < params.top_p <= 1:
        raise RequestError(f"sampling_parameters.top_p must be in (0, 1], got {params.top_p}")
    if params.top_k < 0:
        raise RequestError(f"sampling_parameters.top_k must be >= 0 (0: off), got {params.top_k}")
    if not 0 <= params.min_tokens <= params.max_tokens:
        raise RequestError(f"sampling_parameters.min_tokens must be in [0, max_tokens={params.max_tokens}], got {params.min_tokens}")
    return params


def parse_request(inputs: Mapping[str, object], max_tokens_limit: int, request_parameters: str | None = None) -> ParsedRequest:
    """`inputs`: input name -> first element of its array (bytes for strings, bool for flags),
    absent inputs left out. `request_parameters`: the request's own parameters as JSON,
    read for sampling when the `sampling_parameters` input is absent."""
    raw_prompt = inputs.get("text_input")
    if raw_prompt is None:
        raise RequestError("text_input is missing")
    prompt = decode_utf8("text_input", raw_prompt)
    if not prompt:
        raise RequestError("text_input is empty: give a prompt")
    stream = bool(inputs.get("stream", False))
    exclude = inputs.get("exclude_input_in_output")
    exclude_input = stream if exclude is None else bool(exclude)
    if stream and not exclude_input:
        raise RequestError("exclude_input_in_output=false cannot be used with stream=true (the prompt is not streamed back)")
    sampling = inputs.get("sampling_parameters")
    if sampling is None and request_parameters:
        sampling = request_parameters
    params = parse_sampling_parameters(sampling, max_tokens_limit)
    flags = {name: bool(inputs.get(name, False)) for name in RETURN_FLAGS}
    return ParsedRequest(prompt, params, stream, exclude_input, **flags)
