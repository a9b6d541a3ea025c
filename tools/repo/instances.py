"""How many instances a config runs and how many cores they share.

Thread counts are written explicitly with the instance count: NVIDIA's native ONNX
Runtime backend gives every instance all cores when `intra_op_thread_count` is unset, so
a config that leaves it out runs differently there than on a machine whose cores were
shared out. A config keeps its core budget (instances x threads, or this machine's cores
when it does not say) and divides it among its instances. The tuner, the presets, the
benchmarks and the warm-up accounting all count instances here.
"""

from __future__ import annotations

import os

from tools.repo.model_config import ModelConfig
from tools.repo.variant import INTRA_OP_THREADS as THREADS
from tools.repo.variant import is_accelerated


def machine_cores() -> int:
    """Cores this process may run on (a container's or taskset's limit, not the host's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def instance_count(config: ModelConfig) -> int:
    """Instances Triton creates: `count` per group (default 1), per listed GPU for KIND_GPU."""
    total = 0
    for group in config.instance_group:
        per_device = group.count or 1
        total += per_device * max(1, len(group.gpus)) if group.kind == group.KIND_GPU else per_device
    return total or 1


def core_budget(config: ModelConfig) -> int:
    """Cores the config's instances use together: instances x `intra_op_thread_count` when
    the config states it (> 0), at most this machine's cores (the committed encoder runs one
    more one-thread instance than the 2 cores it was measured on, so that an instance is
    always free; one instance in its place gets the cores, not an extra thread); else every
    core of this machine."""
    text = config.parameters[THREADS].string_value if THREADS in config.parameters else ""
    threads = int(text) if text.isdigit() else 0
    return min(threads * instance_count(config), machine_cores()) if threads > 0 else machine_cores()


def with_instances(base: ModelConfig, count: int, budget: int | None = None) -> ModelConfig:
    """A copy with `count` instances per group; on ONNX Runtime models, the core budget (the
    base's by default) divided among all instances, written as `intra_op_thread_count` (>= 1)."""
    if count < 1:
        raise ValueError("an instance count must be >= 1")
    budget = core_budget(base) if budget is None else budget
    config = ModelConfig()
    config.CopyFrom(base)
    if not config.instance_group:
        config.instance_group.add()
    for group in config.instance_group:
        group.count = count
    if is_accelerated(config):
        config.parameters[THREADS].string_value = str(max(1, budget // instance_count(config)))
    return config
