"""The LLM's tokenizer at serving time: the `tokenizers` library on the exported files.

The export writes `tokenizer.json`, `tokenizer_config.json` and `chat_template.jinja`
(transformers' `save_pretrained` layout); this class reads them without importing
transformers, so the Triton model starts in well under a second and renders the chat
template the way transformers does (sandboxed Jinja, trim_blocks + lstrip_blocks).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from tokenizers import Tokenizer

from llm.artifacts import CHAT_TEMPLATE_FILE, TOKENIZER_FILE
from llm.artifacts import TOKENIZER_CONFIG_FILE as CONFIG_FILE


def _token_text(value: object) -> str | None:
    """A special token as tokenizer_config.json stores it: a string or {"content": ...}."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


class LlmTokenizer:
    def __init__(self, tokenizer: Tokenizer, settings: Mapping[str, object], chat_template: str | None) -> None:
        self._tokenizer = tokenizer
        self.bos_token = _token_text(settings.get("bos_token"))
        self.eos_token = _token_text(settings.get("eos_token"))
        self.chat_template = chat_template
        eos_id = tokenizer.token_to_id(self.eos_token) if self.eos_token else None
        self.eos_token_ids = frozenset([eos_id] if eos_id is not None else [])
        self._template = None

    @classmethod
    def from_folder(cls, folder: Path) -> LlmTokenizer:
        folder = Path(folder)
        path = folder / TOKENIZER_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: run `make export` (python -m export) to write the LLM's tokenizer")
        config_path, template_path = folder / CONFIG_FILE, folder / CHAT_TEMPLATE_FILE
        settings = json.loads(config_path.read_text()) if config_path.is_file() else {}
        template = template_path.read_text() if template_path.is_file() else settings.get("chat_template")
        return cls(Tokenizer.from_file(str(path)), settings, template)

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: Iterable[Mapping[str, str]], add_generation_prompt: bool = True) -> str:
        """The prompt text for a conversation ([{"role": ..., "content": ...}, ...])."""
        if self.chat_template is None:
            raise ValueError("this tokenizer has no chat template")
        if self._template is None:
            self._template = _compile(self.chat_template)
        return self._template.render(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token or "",
            eos_token=self.eos_token or "",
        )


def _compile(source: str):
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    environment.globals["raise_exception"] = raise_exception
    environment.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
    return environment.from_string(source)
