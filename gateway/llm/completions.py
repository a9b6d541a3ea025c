"""OpenAI's completions and chat completions requests, checked field by field
(https://platform.openai.com/docs/api-reference/chat, .../completions).

Each refusal names the field, as OpenAI's own errors do. What the served model cannot do
(n > 1, logprobs, tools, echo, suffix, penalties) is refused with a 400 rather than silently
ignored, so a client never mistakes a default for what it asked. Fields that change nothing
about the answer (`user`, `metadata`, `store`, ...) are accepted; any other unknown field is
refused as OpenAI refuses it ("Unrecognized request argument").

The result, a GenerationRequest, is what the `llm` model is sent: the prompt text (for chat,
rendered later with the model's chat template) and vLLM's `sampling_parameters`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.errors import APIError, bad_request

CHAT = "chat"
COMPLETION = "completion"
# OpenAI's default for /v1/completions; chat has none (vLLM: what the context leaves), and
# the model's own limit (max_model_len) then applies: see GenerationRequest.max_tokens.
COMPLETIONS_DEFAULT_MAX_TOKENS = 16
MAX_STOP_SEQUENCES = 4  # OpenAI's limit
ROLES = ("system", "developer", "user", "assistant")

# Accepted and without effect on the answer.
IGNORED = frozenset({"user", "metadata", "store", "service_tier", "parallel_tool_calls", "prediction", "modalities", "reasoning_effort"})
# Accepted only with the value that means "off" (what OpenAI's clients send by default).
OFF_VALUES: dict[str, tuple] = {
    "frequency_penalty": (None, 0, 0.0),
    "presence_penalty": (None, 0, 0.0),
    "logit_bias": (None, {}),
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "echo": (None, False),
    "suffix": (None, ""),
    "best_of": (None, 1),
    "tools": (None, []),
    "tool_choice": (None, "none"),
    "functions": (None, []),
    "function_call": (None, "none"),
    "audio": (None,),
}
# ignore_eos: vLLM's extension (llama-server's too), which load generators send to get exactly max_tokens
COMMON = frozenset({"model", "stream", "stream_options", "max_tokens", "temperature", "top_p", "seed", "stop", "n", "ignore_eos"})
KNOWN = {
    CHAT: COMMON | {"messages", "max_completion_tokens", "response_format"} | IGNORED | set(OFF_VALUES),
    COMPLETION: COMMON | {"prompt"} | IGNORED | set(OFF_VALUES),
}


@dataclass(frozen=True)
class GenerationRequest:
    kind: str  # CHAT or COMPLETION
    model: str
    prompt: str = ""  # completions: the raw prompt
    messages: tuple[dict[str, str], ...] = ()  # chat: role and text of each message, for the chat template
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None  # None: chat without a limit (the context window's)
    sampling: dict[str, object] = field(default_factory=dict)  # temperature, top_p, seed, stop

    def sampling_parameters(self, priority: int, max_tokens: int) -> dict[str, object]:
        """The `llm` model's sampling_parameters; `max_tokens` is settled by the caller. The
        default priority (0) is left out: NVIDIA's Triton vLLM backend hands every key to vLLM's
        SamplingParams, which has no `priority` (ours, and vLLM's generate(), take it)."""
        return {**self.sampling, "max_tokens": max_tokens, **({"priority": priority} if priority else {})}


def _int(payload: dict, name: str, low: int | None = None) -> int | None:
    value = payload.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"'{name}' must be an integer.", name, "invalid_type")
    if low is not None and value < low:
        raise bad_request(f"'{name}' must be at least {low}, not {value}.", name)
    return value


def _number(payload: dict, name: str, low: float, high: float, low_open: bool = False) -> float | None:
    value = payload.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise bad_request(f"'{name}' must be a number.", name, "invalid_type")
    if value > high or value < low or (low_open and value == low):
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise bad_request(f"'{name}' must be in {interval}, not {value}.", name)
    return float(value)


def _bool(payload: dict, name: str) -> bool:
    value = payload.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad_request(f"'{name}' must be true or false.", name, "invalid_type")
    return value


def _stop(value: object) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(item, str) for item in stops):
        raise bad_request("'stop' must be a string or an array of strings.", "stop", "invalid_type")
    if len(stops) > MAX_STOP_SEQUENCES:
        raise bad_request(f"'stop' holds {len(stops)} sequences; at most {MAX_STOP_SEQUENCES} are allowed.", "stop")
    return [stop for stop in stops if stop]


def _check_fields(payload: dict, kind: str) -> None:
    unknown = sorted(set(payload) - KNOWN[kind])
    if unknown:
        raise bad_request(f"Unrecognized request argument supplied: {unknown[0]}.", unknown[0], "unknown_parameter")
    for name, off in OFF_VALUES.items():
        if name in payload and payload[name] not in off:
            raise bad_request(f"'{name}' is not supported by this server (only {off[-1]!r}).", name, "unsupported_parameter")
    n = _int(payload, "n", 1)
    if n not in (None, 1):
        raise bad_request(f"'n' must be 1 on this server (one choice per request), not {n}.", "n", "unsupported_value")


def _model(payload: dict, served: str | Sequence[str]) -> str:
    """The requested model: the LLM (served[0]) or one of its LoRA adapters (the rest)."""
    names = (served,) if isinstance(served, str) else tuple(served)
    model = payload.get("model")
    if model is None:
        raise bad_request("'model' is a required property.", "model", "missing_required_parameter")
    if not isinstance(model, str):
        raise bad_request("'model' must be a string.", "model", "invalid_type")
    if model not in names:
        listed = ", ".join(f"'{name}'" for name in names)
        raise APIError(404, f"The model '{model}' does not exist; this endpoint serves {listed}.", param="model", code="model_not_found")
    return model


def _stream(payload: dict) -> tuple[bool, bool]:
    stream = _bool(payload, "stream")
    options = payload.get("stream_options")
    if options is None:
        return stream, False
    if not stream:
        raise bad_request("'stream_options' is only allowed when 'stream' is true.", "stream_options")
    if not isinstance(options, dict) or set(options) - {"include_usage", "continuous_usage_stats"}:
        raise bad_request("'stream_options' must be an object with 'include_usage'.", "stream_options", "invalid_type")
    return stream, _bool(options, "include_usage")


def _sampling(payload: dict) -> dict[str, object]:
    sampling: dict[str, object] = {}
    temperature = _number(payload, "temperature", 0.0, 2.0)
    top_p = _number(payload, "top_p", 0.0, 1.0, low_open=True)
    seed = _int(payload, "seed")
    stop = _stop(payload.get("stop"))
    if temperature is not None:
        sampling["temperature"] = temperature
    if top_p is not None:
        sampling["top_p"] = top_p
    if seed is not None:
        sampling["seed"] = seed
    if _bool(payload, "ignore_eos"):
        sampling["ignore_eos"] = True
    if stop:
        sampling["stop"] = stop
    return sampling


def _text_content(content: object, where: str) -> str:
    """A message's text: a string, or an array of text parts (what newer clients send)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for index, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad_request(
                    f"'{where}[{index}]' must be a text part ({{'type': 'text', 'text': ...}}); this model reads text only.",
                    f"{where}[{index}]",
                    "unsupported_content",
                )
            texts.append(part["text"])
        return "".join(texts)
    raise bad_request(f"'{where}' must be a string or an array of text parts.", where, "invalid_type")


def _messages(value: object) -> tuple[dict[str, str], ...]:
    if not isinstance(value, list):
        raise bad_request("'messages' must be an array of messages.", "messages", "invalid_type")
    if not value:
        raise bad_request("'messages' must not be empty.", "messages")
    messages = []
    for index, message in enumerate(value):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise bad_request(f"'{where}' must be an object with 'role' and 'content'.", where, "invalid_type")
        role = message.get("role")
        if role not in ROLES:
            raise bad_request(f"'{where}.role' must be one of {', '.join(ROLES)}, not {role!r}.", f"{where}.role")
        if message.get("tool_calls") or message.get("function_call"):
            raise bad_request(f"'{where}' carries tool calls; this server does not support tools.", where, "unsupported_parameter")
        if "content" not in message or message["content"] is None:
            raise bad_request(f"'{where}.content' is a required property.", f"{where}.content", "missing_required_parameter")
        # `developer` is OpenAI's newer name for the system role; the chat template knows `system`.
        messages.append(
            {"role": "system" if role == "developer" else role, "content": _text_content(message["content"], f"{where}.content")}
        )
    return tuple(messages)


def _prompt(value: object) -> str:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        value = value[0]  # a batch of one prompt
    if isinstance(value, str):
        if not value:
            raise bad_request("'prompt' must not be an empty string.", "prompt")
        return value
    if isinstance(value, list) and value and all(isinstance(item, int) and not isinstance(item, bool) for item in value):
        raise bad_request("Token-id prompts are not supported by this server; send the prompt as a string.", "prompt", "unsupported_input")
    if isinstance(value, list):
        raise bad_request("'prompt' must be one string; this server answers one prompt per request.", "prompt", "unsupported_value")
    raise bad_request("'prompt' must be a string.", "prompt", "invalid_type")


def parse_completion(payload: dict, served: str | Sequence[str]) -> GenerationRequest:
    """POST /v1/completions."""
    _check_fields(payload, COMPLETION)
    model = _model(payload, served)
    if "prompt" not in payload:
        raise bad_request("'prompt' is a required property.", "prompt", "missing_required_parameter")
    prompt = _prompt(payload["prompt"])
    stream, include_usage = _stream(payload)
    max_tokens = _int(payload, "max_tokens", 1)
    return GenerationRequest(
        COMPLETION,
        model,
        prompt=prompt,
        stream=stream,
        include_usage=include_usage,
        max_tokens=COMPLETIONS_DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
        sampling=_sampling(payload),
    )


def parse_chat(payload: dict, served: str | Sequence[str]) -> GenerationRequest:
    """POST /v1/chat/completions; `max_completion_tokens` is OpenAI's newer name for `max_tokens`."""
    _check_fields(payload, CHAT)
    model = _model(payload, served)
    if "messages" not in payload:
        raise bad_request("'messages' is a required property.", "messages", "missing_required_parameter")
    messages = _messages(payload["messages"])
    response_format = payload.get("response_format")
    if response_format is not None and response_format != {"type": "text"}:
        raise bad_request("'response_format' other than {'type': 'text'} is not supported.", "response_format", "unsupported_parameter")
    stream, include_usage = _stream(payload)
    completion_tokens = _int(payload, "max_completion_tokens", 1)
    max_tokens = completion_tokens if completion_tokens is not None else _int(payload, "max_tokens", 1)
    return GenerationRequest(
        CHAT, model, messages=messages, stream=stream, include_usage=include_usage, max_tokens=max_tokens, sampling=_sampling(payload)
    )
