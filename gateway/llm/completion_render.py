"""OpenAI's completion and chat completion answers, whole or as server-sent-event chunks.

Shapes as OpenAI sends them: `text_completion` with `choices[].text` for /v1/completions,
`chat.completion` / `chat.completion.chunk` with `message` / `delta` for chat. A chat stream
opens with a chunk carrying the assistant's role, every chunk names the same id, the last one
with a choice carries `finish_reason`, and with `stream_options.include_usage` every chunk has
`usage: null` but a final one with no choices and the usage. The stream ends with
`data: [DONE]`; an error after the status line was sent travels as one `data: {"error": ...}`.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field

import orjson

from gateway.errors import APIError
from gateway.llm.completions import CHAT, GenerationRequest

DONE = b"data: [DONE]\n\n"
# The `llm` model's finish reasons that OpenAI also has; others (e.g. "abort") read as "stop".
FINISH_REASONS = ("stop", "length")


def event(body: dict) -> bytes:
    return b"data: " + orjson.dumps(body) + b"\n\n"


def error_event(error: APIError) -> bytes:
    return event(error.body())


def finish_reason(reason: str | None) -> str | None:
    if reason is None:
        return None
    return reason if reason in FINISH_REASONS else "stop"


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def body(self) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


@dataclass
class Completion:
    """One answer in the making: its id, its usage so far, and how each piece is shown."""

    request: GenerationRequest
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))
    usage: Usage = field(default_factory=Usage)

    def __post_init__(self) -> None:
        if not self.id:
            self.id = ("chatcmpl-" if self.chat else "cmpl-") + secrets.token_hex(12)

    @property
    def chat(self) -> bool:
        return self.request.kind == CHAT

    def count(self, prompt_tokens: int | None, completion_tokens: int) -> None:
        if prompt_tokens is not None:
            self.usage.prompt_tokens = prompt_tokens
        self.usage.completion_tokens += completion_tokens

    def _envelope(self, chunk: bool) -> dict:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat else "text_completion"
        body = {"id": self.id, "object": kind, "created": self.created, "model": self.request.model}
        if self.chat:
            body["system_fingerprint"] = None
        return body

    def body(self, text: str, reason: str | None) -> dict:
        """The whole answer (stream false)."""
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None}
        choice["finish_reason"] = finish_reason(reason)
        return {**self._envelope(False), "choices": [choice], "usage": self.usage.body()}

    def chunk(self, text: str, reason: str | None, first: bool = False) -> bytes:
        if self.chat:
            delta: dict = {"role": "assistant", "content": text} if first else ({"content": text} if text else {})
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason(reason)}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason(reason)}
        body = {**self._envelope(True), "choices": [choice]}
        if self.request.include_usage:
            body["usage"] = None
        return event(body)

    def usage_chunk(self) -> bytes:
        return event({**self._envelope(True), "choices": [], "usage": self.usage.body()})
