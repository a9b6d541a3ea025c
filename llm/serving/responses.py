"""Which responses a request's engine outputs become, following Triton's vLLM backend:
streaming sends each step's new text, the last one flagged final; otherwise one final
response carries the whole text, after the prompt unless `exclude_input_in_output`.
Errors and cancellations end the request with one final error response. Kept apart from
the Triton model so the rules are tested without a server.
"""

from __future__ import annotations

from dataclasses import dataclass

from llm.contract import RequestOutput
from llm.serving.request import ParsedRequest


@dataclass(frozen=True)
class Reply:
    """One response to send. `error` set: an error response; `cancelled`: the client went away."""

    final: bool
    text: str = ""
    finish_reason: str | None = None
    num_input_tokens: int = 0
    num_output_tokens: int = 0  # tokens generated since the previous reply (the vLLM backend's delta)
    error: str | None = None
    cancelled: bool = False
    overloaded: bool = False  # the request waited past its queue_timeout_ms: the server is busy (UNAVAILABLE)


class ResponsePlan:
    """Per request: turns each RequestOutput into the replies to send (none, or one)."""

    def __init__(self, request: ParsedRequest) -> None:
        self.request = request
        self._text: list[str] = []
        self._tokens_since_reply = 0
        self.finished = False

    def replies(self, output: RequestOutput) -> list[Reply]:
        if self.finished:
            return []
        self._tokens_since_reply += len(output.new_token_ids)
        if output.finished:
            self.finished = True
            if output.finish_reason == "abort":
                return [Reply(final=True, error="the request was cancelled", cancelled=True)]
            if output.finish_reason == "timeout":
                return [Reply(final=True, error=f"server busy: {output.error or 'queue timeout'}", overloaded=True)]
            if output.finish_reason == "error" or output.error:
                return [Reply(final=True, error=output.error or "the engine failed this request")]
        if self.request.stream:
            if not output.new_text and not output.finished:
                return []  # e.g. a partial UTF-8 character held back: nothing to show yet
            return [self._reply(output, output.new_text)]
        self._text.append(output.new_text)
        if not output.finished:
            return []
        prefix = "" if self.request.exclude_input_in_output else self.request.prompt
        return [self._reply(output, prefix + "".join(self._text))]

    def _reply(self, output: RequestOutput, text: str) -> Reply:
        tokens, self._tokens_since_reply = self._tokens_since_reply, 0
        return Reply(output.finished, text, output.finish_reason, output.num_prompt_tokens, tokens)
