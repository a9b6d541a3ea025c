"""The compute dtype: the `dtype` knob, with `auto` resolved from what the CPU can do."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
BF16_CPU_FLAGS = frozenset({"amx_bf16", "amx_tile", "avx512_bf16"})


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The first CPU's feature flags (empty when /proc/cpuinfo is unreadable, e.g. not Linux)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def resolve_dtype(dtype: str, device: str, flags: Iterable[str] | None = None) -> str:
    """`dtype` itself, or for `auto` the faster one on this machine: bfloat16 on cuda and on CPUs
    with a bfloat16 matmul path (AMX, AVX512_BF16: oneDNN's bf16 products run up to 3x faster
    than float32 there), float32 elsewhere (on the AVX2 EPYCs bf16 products run 3.3x slower than
    float32: docs/decisions/llm-float32-products.md). `flags` defaults to /proc/cpuinfo's."""
    if dtype != "auto":
        return dtype
    if device.startswith("cuda"):
        return "bfloat16"
    return "bfloat16" if BF16_CPU_FLAGS & set(cpu_flags() if flags is None else flags) else "float32"
