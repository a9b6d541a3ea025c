"""`usage.prompt_tokens`: the tokens the model reads, counted with its own tokenizer.json.

The same file the Triton tokenizer step loads (truncation at the model's maximum length
and special tokens included), without padding, so the count does not depend on which
other texts shared a batch. Texts are cut at the tokenizer step's `max_text_chars`
first, as the step does, so counting a huge text costs what serving it costs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer

# The tokenizer step's default cut (model_repository/tokenizer/1/model.py, DEFAULT_MAX_TEXT_CHARS).
MAX_TEXT_CHARS = 65536
# Below this many characters counting takes microseconds: done inline, not in a thread.
INLINE_CHARS = 8192


class TokenCounter:
    def __init__(self, path: Path, max_text_chars: int = MAX_TEXT_CHARS) -> None:
        self.tokenizer = Tokenizer.from_file(str(path))
        self.tokenizer.no_padding()
        self.max_text_chars = max_text_chars

    def count(self, texts: Sequence[str]) -> int:
        cut = [text[: self.max_text_chars] for text in texts]
        return sum(len(encoding) for encoding in self.tokenizer.encode_batch_fast(cut, add_special_tokens=True))

    async def count_async(self, texts: Sequence[str]) -> int:
        """Large inputs are counted in a worker thread (the tokenizers library releases the GIL)."""
        if sum(len(text) for text in texts) <= INLINE_CHARS:
            return self.count(texts)
        return await asyncio.to_thread(self.count, texts)
