"""Output processing: tokens to streamed text, stop strings, EOS and finish reasons.

Text is decoded incrementally over a window of recent tokens (vLLM's prefix/read offsets):
decoding a token alone loses the spaces and multi-byte characters that depend on its
neighbours, and decoding the whole output each step costs O(n) per token. A trailing U+FFFD
means an incomplete UTF-8 character: it is held back until the next token completes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from llm.contract import SamplingParams

PROMPT_CONTEXT_TOKENS = 5  # prompt tokens the first output token is decoded against (spacing)


class Decoder(Protocol):
    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...


class IncrementalDetokenizer:
    """Turns one token at a time into text deltas."""

    def __init__(self, decoder: Decoder, prompt_token_ids: Sequence[int]) -> None:
        self._decoder = decoder
        self._tokens = list(prompt_token_ids[-PROMPT_CONTEXT_TOKENS:])
        self._prefix_offset = 0  # window start: context for the tokens being decoded
        self._read_offset = len(self._tokens)  # tokens before this are already in the text

    def add(self, token_id: int) -> str:
        """The new text this token completes ('' while a character is incomplete)."""
        self._tokens.append(token_id)
        prefix = self._decoder.decode(self._tokens[self._prefix_offset : self._read_offset], skip_special_tokens=True)
        full = self._decoder.decode(self._tokens[self._prefix_offset :], skip_special_tokens=True)
        if len(full) <= len(prefix) or full.endswith("\ufffd"):
            return ""
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._tokens)
        return full[len(prefix) :]


@dataclass
class StepResult:
    new_text: str
    finish_reason: str | None  # None: still running


@dataclass
class OutputState:
    """One request's text: what was sent, what is held back, and whether it has ended."""

    params: SamplingParams
    eos_token_ids: frozenset[int]
    detokenizer: IncrementalDetokenizer
    text: str = ""  # everything decoded and not cut by a stop string
    sent: int = 0  # characters of `text` already handed to the client
    num_output_tokens: int = 0
    _max_stop_len: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._max_stop_len = max((len(stop) for stop in self.params.stop), default=0)

    def add_token(self, token_id: int) -> StepResult:
        """Account one generated token; returns the text now safe to send and the finish reason."""
        self.num_output_tokens += 1
        may_stop = self.num_output_tokens >= self.params.min_tokens
        if token_id in self.eos_token_ids and not self.params.ignore_eos and may_stop:
            return StepResult(self._flush(), "stop")
        delta = self.detokenizer.add(token_id)
        if delta:
            searched_from = max(0, len(self.text) - self._max_stop_len + 1)
            self.text += delta
            if may_stop and self._cut_at_stop_string(searched_from):
                return StepResult(self._flush(), "stop")
        if self.num_output_tokens >= self.params.max_tokens:
            return StepResult(self._flush(), "length")
        return StepResult(self._release(), None)

    def _cut_at_stop_string(self, searched_from: int) -> bool:
        """Cut the text before the earliest stop string found in the new part (it may span tokens)."""
        found = [i for i in (self.text.find(stop, searched_from) for stop in self.params.stop if stop) if i >= 0]
        if not found:
            return False
        self.text = self.text[: min(found)]
        return True

    def _release(self) -> str:
        """Send all but a tail that could still be the start of a stop string."""
        end = len(self.text) - self._held_back()
        if end <= self.sent:
            return ""
        delta, self.sent = self.text[self.sent : end], end
        return delta

    def _held_back(self) -> int:
        if not self.params.stop:
            return 0
        for length in range(min(self._max_stop_len - 1, len(self.text) - self.sent), 0, -1):
            tail = self.text[-length:]
            if any(stop.startswith(tail) for stop in self.params.stop):
                return length
        return 0

    def _flush(self) -> str:
        delta, self.sent = self.text[self.sent :], len(self.text)
        return delta
