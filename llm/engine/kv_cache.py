"""The paged KV cache: fixed-size blocks preallocated once from a memory budget.

K and V are `[layers, num_blocks, block_size, kv_heads, head_dim]` tensors; the scheduler
hands out block numbers and every chunk carries its sequence's block table, so the engine
never allocates during a step and a sequence's tokens may live in any blocks.
"""

from __future__ import annotations

import torch

from llm.engine.checkpoint import LlamaDims


def bytes_per_block(dims: LlamaDims, block_size: int, dtype: torch.dtype) -> int:
    """K and V of one block over all layers."""
    return 2 * dims.num_layers * block_size * dims.num_kv_heads * dims.head_dim * torch.empty((), dtype=dtype).element_size()


class PagedKVCache:
    def __init__(self, dims: LlamaDims, block_size: int, kv_cache_bytes: int, dtype: torch.dtype, device: torch.device) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, not {block_size}")
        per_block = bytes_per_block(dims, block_size, dtype)
        self.num_blocks = kv_cache_bytes // per_block
        if self.num_blocks < 1:
            raise ValueError(f"kv_cache_bytes={kv_cache_bytes} holds no block ({per_block} bytes each at block_size {block_size})")
        self.block_size = block_size
        shape = (dims.num_layers, self.num_blocks, block_size, dims.num_kv_heads, dims.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        # Per-layer views: by slot (block * block_size + offset) for writes, by block for reads.
        self.k_slots = self.k.view(dims.num_layers, self.num_blocks * block_size, dims.num_kv_heads, dims.head_dim)
        self.v_slots = self.v.view(dims.num_layers, self.num_blocks * block_size, dims.num_kv_heads, dims.head_dim)

    @property
    def num_bytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()
