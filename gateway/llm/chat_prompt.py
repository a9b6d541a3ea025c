"""Chat messages into the `llm` model's prompt: the chat template its export wrote.

The `llm` model takes raw text (as Triton's vLLM backend does), so the gateway renders the
conversation with the model's own template (llm.tokenizer.LlmTokenizer, the files in the
model's version folder: the same tokenizer Triton's model encodes with). Loaded on first use,
so a gateway in front of a Triton without the LLM starts without its files.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from gateway.errors import UNAVAILABLE, APIError, bad_request
from llm.tokenizer import LlmTokenizer


class ChatPrompts:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._tokenizer: LlmTokenizer | None = None
        self._lock = threading.Lock()

    @property
    def tokenizer(self) -> LlmTokenizer:
        with self._lock:
            if self._tokenizer is None:
                try:
                    self._tokenizer = LlmTokenizer.from_folder(self.folder)
                except (FileNotFoundError, ValueError) as exc:
                    raise APIError(503, f"The LLM's tokenizer is not available: {exc}", UNAVAILABLE, None, "model_files_missing") from None
            return self._tokenizer

    def render(self, messages: Sequence[dict[str, str]]) -> str:
        """The prompt for the assistant's next turn; a template's own refusal is the client's 400."""
        from jinja2.exceptions import TemplateError

        tokenizer = self.tokenizer
        if tokenizer.chat_template is None:
            raise APIError(500, f"The LLM in {self.folder} has no chat template; use /v1/completions.", code="no_chat_template")
        try:
            return tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        except TemplateError as exc:
            raise bad_request(f"The model's chat template refused the messages: {exc}", "messages") from None

    def count(self, text: str) -> int:
        """Tokens the model will read for this prompt (it encodes with the same tokenizer)."""
        return len(self.tokenizer.encode(text))
