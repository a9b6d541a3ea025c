"""The `attention` knob: how decode rows attend to their paged KV.

`paged`: our C++ kernel (llm/engine/kernels/paged_attention.cpp), one call per layer for every
decoding sequence, reading keys and values in place through the block tables. `padded`: torch's
SDPA over the keys gathered into a padded copy, one call per group of similar lengths (the
portable path: any device, no compiler). `auto` is `paged` on a CPU that has the kernel's
instructions and a compiler to build it, else `padded` with a warning saying why.

The kernel walks each sequence's blocks once (online softmax) and prefetches the blocks two
ahead; bfloat16 caches on a CPU with AVX512-BF16 get their scores from vdpbf16ps. On 16 and 32
sequences of ~300 tokens (SmolLM2's 9 query / 3 KV heads, bfloat16, caches out of cache) it
took 0.51x the time of the two-pass AVX2 kernel it replaced on the AMX Xeon (quiet, 2 threads;
docs/results/2026-12-07-llm-paged-attention-one-pass.md). Each sequence is computed alone and
in one order, so its attention does not depend on what shares the step. Prefill chunks keep
SDPA (the causal product over a chunk is a matrix product, where torch's blocked kernel wins).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from llm.engine.kernels.load import KernelUnavailable, load_kernels

logger = logging.getLogger(__name__)

ATTENTION_CHOICES = ("auto", "paged", "padded")
PAGED_DTYPES = frozenset({torch.float32, torch.bfloat16})
PAGED_HEAD_DIM_MULTIPLE, PAGED_MAX_HEAD_DIM = 8, 256  # the kernel's kLanes and kMaxHeadDim

# query [n, heads, D], key/value cache [blocks, block_size, kv_heads, D], tables [n, width],
# context lengths [n], scale, out [n, heads, D] (written)
PagedDecodeAttention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float, torch.Tensor], None]


def paged_kernel(device: torch.device, dtype: torch.dtype, head_dim: int) -> PagedDecodeAttention:
    """The kernel, built if needed and loaded; KernelUnavailable naming what is missing."""
    if dtype not in PAGED_DTYPES:
        raise KernelUnavailable(f"the paged attention kernel supports float32 and bfloat16, not {dtype}")
    if head_dim % PAGED_HEAD_DIM_MULTIPLE or head_dim > PAGED_MAX_HEAD_DIM:
        raise KernelUnavailable(
            f"the paged attention kernel needs a head_dim that is a multiple of {PAGED_HEAD_DIM_MULTIPLE} "
            f"up to {PAGED_MAX_HEAD_DIM}, not {head_dim}"
        )
    load_kernels("paged_attention", device)
    return torch.ops.llm_kernels.paged_decode_attention


def resolve_attention(choice: str, device: torch.device, dtype: torch.dtype, head_dim: int) -> tuple[str, PagedDecodeAttention | None]:
    """(`paged` or `padded`, the kernel or None) for the knob's value; `auto` falls back to
    `padded` with a warning, an explicit `paged` that cannot run raises KernelUnavailable."""
    if choice not in ATTENTION_CHOICES:
        raise ValueError(f"attention {choice!r} is not one of {list(ATTENTION_CHOICES)}")
    if choice == "padded":
        return "padded", None
    try:
        return "paged", paged_kernel(device, dtype, head_dim)
    except KernelUnavailable as error:
        if choice == "paged":
            raise
        logger.warning("attention: auto falls back to padded SDPA: %s", error)
        return "padded", None
