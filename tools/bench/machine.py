"""The machine a benchmark ran on, for its report header: only ratios measured in one run
carry across machines, so every report names the CPU its figures come from."""

from __future__ import annotations

import os
import platform
from pathlib import Path

# Instruction sets that decide ONNX Runtime's speed on a CPU: AVX2 everywhere, AVX-512 and
# VNNI (int8 dot products) on newer x86, AMX on Sapphire Rapids and later.
FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile")


def cpu_description() -> dict:
    """{"model", "cores", "flags"} from /proc/cpuinfo (what lscpu prints); the model falls back
    to platform.processor() where there is no /proc."""
    model, flags = platform.processor(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    return {"model": model, "cores": os.cpu_count(), "flags": [f for f in FLAGS if f in flags]}


def describe_cpu(cpu: dict) -> str:
    """One line: 'AMD EPYC, 2 cores, avx2 fma avx512f avx512_vnni'."""
    flags = " ".join(cpu.get("flags") or []) or "no AVX"
    return f"{cpu.get('model') or 'unknown CPU'}, {cpu.get('cores')} cores, {flags}"
