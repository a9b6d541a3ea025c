"""Which CPU a benchmark ran on, for report headers.

Absolute figures move 4x between the machines this project runs on (AVX2-only cores
versus AVX-512/VNNI ones, shared or quiet); a report that does not say which CPU it
measured cannot be compared with another.
"""

from __future__ import annotations

import os
import subprocess

# The instruction-set extensions that change ONNX Runtime's speed on a CPU.
VECTOR_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8")


def lscpu_fields() -> dict[str, str]:
    try:
        output = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    fields = {}
    for line in output.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def describe_cpu() -> dict:
    """Model, logical CPUs, the vector flags present, and the load average when measured."""
    fields = lscpu_fields()
    flags = set(fields.get("Flags", "").split())
    try:
        load = [round(value, 2) for value in os.getloadavg()]
    except OSError:
        load = None
    return {
        "model": fields.get("Model name") or "unknown",
        "cpus": os.cpu_count(),
        "vector_flags": [flag for flag in VECTOR_FLAGS if flag in flags],
        "load_average": load,
    }


def cpu_line(cpu: dict) -> str:
    flags = ", ".join(cpu["vector_flags"]) or "none of " + ", ".join(VECTOR_FLAGS)
    load = f"; load average {cpu['load_average'][0]:.1f} at the start" if cpu.get("load_average") else ""
    return f"CPU: {cpu['model']}, {cpu['cpus']} logical CPUs; vector extensions: {flags}{load}"


def cpu_description() -> dict:
    """The same facts under the keys the bench and gateway reports store:
    {"model", "cores", "flags"} (flags: the vector extensions present)."""
    cpu = describe_cpu()
    return {"model": cpu["model"], "cores": cpu["cpus"], "flags": cpu["vector_flags"]}


def cpu_summary(cpu: dict) -> str:
    """One line from a `cpu_description()`: 'AMD EPYC, 2 cores, avx2 avx512f avx512_vnni'."""
    flags = " ".join(cpu.get("flags") or []) or "no AVX"
    return f"{cpu.get('model') or 'unknown CPU'}, {cpu.get('cores')} cores, {flags}"
