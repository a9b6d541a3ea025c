"""KV block allocation: a free list of block ids, as vLLM's paged KV cache.

The engine owns the KV tensors; this side only decides which block ids a sequence may
write, so the scheduler can admit and preempt without touching the engine.
"""

from __future__ import annotations

from collections import deque


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks that hold `num_tokens` positions."""
    return -(-num_tokens // block_size)


class BlockManager:
    """Hands out block ids from a free list; a sequence's blocks return to it all at once."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError(f"num_blocks ({num_blocks}) and block_size ({block_size}) must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: deque[int] = deque(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    def missing_blocks(self, block_table: list[int], num_tokens: int) -> int:
        """Blocks to add to `block_table` so it covers `num_tokens` positions."""
        return max(0, blocks_for(num_tokens, self.block_size) - len(block_table))

    def can_grow(self, block_table: list[int], num_tokens: int) -> bool:
        return self.missing_blocks(block_table, num_tokens) <= len(self._free)

    def grow(self, block_table: list[int], num_tokens: int) -> None:
        """Extend `block_table` in place to cover `num_tokens`; the caller checked `can_grow`."""
        missing = self.missing_blocks(block_table, num_tokens)
        if missing > len(self._free):
            raise RuntimeError(f"{missing} KV blocks needed, {len(self._free)} free")
        block_table.extend(self._free.popleft() for _ in range(missing))

    def release(self, block_table: list[int]) -> None:
        """Return every block of a sequence and empty its table."""
        self._free.extend(block_table)
        block_table.clear()
