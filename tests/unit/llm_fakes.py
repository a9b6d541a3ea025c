"""A deterministic fake StepExecutor and tokenizer for the LLM scheduler and loop tests.

The fake keeps its own paged "KV cache" (token ids per block) and computes each sequence's
next token from the context it reads back through the block table: a wrong block table, a
wrong position, a lost recompute or a shared (prefix-cached) block overwritten too early
changes the tokens, so comparing with `reference_tokens` checks the scheduler's bookkeeping,
not only its order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from llm.contract import ScheduledChunk

VOCAB = 40
EOS = 0


def default_rule(context: Sequence[int]) -> int:
    """Next token as a function of the whole context; never EOS."""
    return 1 + (sum(context) * 31 + len(context)) % (VOCAB - 1)


def reference_tokens(prompt: Sequence[int], max_tokens: int, rule: Callable[[Sequence[int]], int] = default_rule) -> list[int]:
    context = list(prompt)
    for _ in range(max_tokens):
        context.append(rule(context))
    return context[len(prompt) :]


class FakeExecutor:
    def __init__(
        self,
        *,
        block_size: int = 4,
        num_blocks: int = 64,
        max_model_len: int = 512,
        rule: Callable[[Sequence[int]], int] = default_rule,
    ) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.max_model_len = max_model_len
        self.eos_token_ids = frozenset({EOS})
        self.adapter_slots: dict[str, int] = {}
        self.rule = rule
        self.plans: list[tuple[ScheduledChunk, ...]] = []
        self._kv: dict[int, list[int | None]] = {}
        self.fail_next = False

    def execute(self, chunks: Sequence[ScheduledChunk]) -> torch.Tensor:
        self.plans.append(tuple(chunks))
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("injected failure")
        written = [
            chunk.block_table[position // self.block_size]
            for chunk in chunks
            for position in {p - p % self.block_size for p in range(chunk.start_position, chunk.start_position + len(chunk.token_ids))}
        ]
        assert len(written) == len(set(written)), "two sequences write into one KV block (only full cached blocks may be shared)"
        rows = []
        for chunk in chunks:
            end = chunk.start_position + len(chunk.token_ids)
            assert len(chunk.block_table) * self.block_size >= end, "block table too short"
            for offset, token in enumerate(chunk.token_ids):
                self._write(chunk.block_table, chunk.start_position + offset, token)
            if chunk.sample:
                context = [self._read(chunk.block_table, position) for position in range(end)]
                rows.append(self._logits(self.rule(context)))
        return torch.stack(rows) if rows else torch.empty(0, VOCAB)

    def _write(self, table: Sequence[int], position: int, token: int) -> None:
        block = self._kv.setdefault(table[position // self.block_size], [None] * self.block_size)
        block[position % self.block_size] = token

    def _read(self, table: Sequence[int], position: int) -> int:
        token = self._kv[table[position // self.block_size]][position % self.block_size]
        assert token is not None, f"position {position} was never written"
        return token

    @staticmethod
    def _logits(target: int) -> torch.Tensor:
        """A peak on `target`, a smaller one on the next token (what wins when EOS is masked)."""
        logits = torch.zeros(VOCAB)
        logits[target] = 10.0
        logits[(target + 1) % VOCAB or 1] = 5.0
        return logits


class FakeTokenizer:
    """Token i is the text "<i>"; EOS is special (skipped)."""

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return "".join(f"<{i}>" for i in ids if not (skip_special_tokens and i == EOS))


class ByteTokenizer:
    """Token i is byte i (UTF-8 characters span tokens), decoded with replacement characters."""

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return bytes(ids).decode("utf-8", errors="replace")
