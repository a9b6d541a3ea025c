"""KV block allocation with prefix caching, as vLLM's paged KV cache and its block pool.

The engine owns the KV tensors; this side only decides which block ids a sequence may
write, so the scheduler can admit and preempt without touching the engine.

Prefix caching: a full block is named by a chained hash of (its parent block's hash, its
token ids), so equal hashes mean equal token prefixes and so equal KV. A full block is
registered under its hash once computed; a later sequence whose prompt starts with the same
blocks takes them instead of prefilling them again (reference counts: a block is free only
when no sequence holds it). A free block that is still registered keeps its KV until a fresh
block is needed and no never-cached block is free: then the least recently freed cached
block is evicted (LRU). Shared blocks are only read: a hit never covers a sequence's last
known token, so what a step writes always lands in the sequence's own blocks.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict, deque
from collections.abc import Sequence

BlockHash = bytes
ROOT_HASH: BlockHash = b""


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks that hold `num_tokens` positions."""
    return -(-num_tokens // block_size)


def block_hash(parent: BlockHash, token_ids: Sequence[int]) -> BlockHash:
    """The chained hash of a full block: it names the whole prefix up to the block's end.
    SHA-256 (as vLLM's `sha256` option), so a collision cannot hand one prompt another's KV."""
    return hashlib.sha256(parent + array("q", token_ids).tobytes()).digest()


def chain_hashes(
    token_ids: Sequence[int], block_size: int, known: list[BlockHash], num_tokens: int | None = None, root: BlockHash = ROOT_HASH
) -> list[BlockHash]:
    """Extend `known` (the hashes of the first blocks) to every full block of the first
    `num_tokens` of `token_ids` (all of them by default); `root` is the first block's parent."""
    end = len(token_ids) if num_tokens is None else num_tokens
    for index in range(len(known), end // block_size):
        parent = known[-1] if known else root
        known.append(block_hash(parent, token_ids[index * block_size : (index + 1) * block_size]))
    return known


class BlockManager:
    """Hands out block ids; with `prefix_caching`, full blocks are shared by hash."""

    def __init__(self, num_blocks: int, block_size: int, *, prefix_caching: bool = False) -> None:
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError(f"num_blocks ({num_blocks}) and block_size ({block_size}) must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self._refs = [0] * num_blocks
        self._free: deque[int] = deque(range(num_blocks))  # free and holding no cached KV
        self._evictable: OrderedDict[int, None] = OrderedDict()  # free, cached: least recently freed first
        self._by_hash: dict[BlockHash, int] = {}
        self._hash_of: dict[int, BlockHash] = {}

    @property
    def num_free(self) -> int:
        """Blocks a sequence can get: never-cached ones and evictable cached ones."""
        return len(self._free) + len(self._evictable)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def num_cached(self) -> int:
        """Blocks registered under a hash (held or evictable)."""
        return len(self._hash_of)

    def ref_count(self, block: int) -> int:
        return self._refs[block]

    # -- prefix cache ---------------------------------------------------------------------

    def lookup(self, hashes: Sequence[BlockHash], num_tokens: int) -> list[int]:
        """The cached blocks that hold the longest prefix of a sequence of `num_tokens` tokens
        whose full blocks hash to `hashes`, leaving at least its last token to compute (its
        logits are needed, and a shared block must never be written)."""
        if not self.prefix_caching:
            return []
        hit: list[int] = []
        for hashed in hashes[: (num_tokens - 1) // self.block_size]:
            block = self._by_hash.get(hashed)
            if block is None:
                break
            hit.append(block)
        return hit

    def blocks_needed(self, hit: Sequence[int], num_tokens: int) -> int:
        """Free blocks that taking `hit` and growing to `num_tokens` positions would consume."""
        reused_free = sum(1 for block in hit if self._refs[block] == 0)
        return reused_free + max(0, blocks_for(num_tokens, self.block_size) - len(hit))

    def take(self, block_table: list[int], hit: Sequence[int]) -> None:
        """Start an empty `block_table` with the cached blocks of a prefix hit."""
        if block_table:
            raise RuntimeError("a prefix hit starts an empty block table")
        for block in hit:
            if self._refs[block] == 0:
                del self._evictable[block]
            self._refs[block] += 1
            block_table.append(block)

    def register(self, block_table: Sequence[int], hashes: Sequence[BlockHash]) -> None:
        """Name the sequence's full computed blocks by their hashes (`hashes[i]` is block i's).
        A block whose prefix another block already caches stays unnamed (a duplicate)."""
        if not self.prefix_caching:
            return
        for block, hashed in zip(block_table, hashes):
            if block in self._hash_of or hashed in self._by_hash:
                continue
            self._by_hash[hashed] = block
            self._hash_of[block] = hashed

    # -- allocation -----------------------------------------------------------------------

    def missing_blocks(self, block_table: list[int], num_tokens: int) -> int:
        """Blocks to add to `block_table` so it covers `num_tokens` positions."""
        return max(0, blocks_for(num_tokens, self.block_size) - len(block_table))

    def can_grow(self, block_table: list[int], num_tokens: int) -> bool:
        return self.missing_blocks(block_table, num_tokens) <= self.num_free

    def grow(self, block_table: list[int], num_tokens: int) -> None:
        """Extend `block_table` in place to cover `num_tokens`; the caller checked `can_grow`."""
        missing = self.missing_blocks(block_table, num_tokens)
        if missing > self.num_free:
            raise RuntimeError(f"{missing} KV blocks needed, {self.num_free} free")
        block_table.extend(self._fresh() for _ in range(missing))

    def _fresh(self) -> int:
        """A never-cached free block, else the least recently freed cached one, evicted."""
        if self._free:
            block = self._free.popleft()
        else:
            block, _ = self._evictable.popitem(last=False)
            del self._by_hash[self._hash_of.pop(block)]
        self._refs[block] = 1
        return block

    def release(self, block_table: list[int]) -> None:
        """Drop a sequence's hold on every block of its table and empty the table. A block no
        one holds becomes free; a cached one stays cached until evicted. The tail is freed
        first, so it is evicted before the prefix that other prompts are likelier to share."""
        for block in reversed(block_table):
            self._refs[block] -= 1
            if self._refs[block] < 0:
                raise RuntimeError(f"KV block {block} released more often than taken")
            if self._refs[block] == 0:
                if block in self._hash_of:
                    self._evictable[block] = None
                else:
                    self._free.append(block)
        block_table.clear()
