"""Candidate batching configs and how they are written into a model config.

Preferred batch sizes are always derived together with max_batch_size (never above
it), so a candidate can never be one Triton refuses to load, a failure users report
from tools that sweep the two independently.

Thread counts are written explicitly with the instance count: NVIDIA's native ONNX
Runtime backend gives every instance all cores when `intra_op_thread_count` is unset, so
a config that leaves it out runs differently there than on a machine whose cores were
shared out. A candidate keeps the base config's core budget (instances x threads, or this
machine's cores when the base does not say) and divides it among its instances.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import asdict, dataclass, field

from tools.repo.model_config import ModelConfig, batching_problems, has_priority_queues, without_priority_queues
from tools.repo.variant import INTRA_OP_THREADS as THREADS
from tools.repo.variant import is_accelerated


@dataclass(frozen=True, order=True)
class Candidate:
    max_batch_size: int
    preferred: tuple[int, ...]  # () = let the batcher use max_batch_size
    delay_us: int
    instances: int = 1
    priority_queues: bool = True  # False: no priority levels and no queue policies

    @property
    def key(self) -> str:
        preferred = "+".join(map(str, self.preferred)) or "none"
        plain = "" if self.priority_queues else "-noprio"
        return f"mbs{self.max_batch_size}-pref{preferred}-delay{self.delay_us}-inst{self.instances}{plain}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> Candidate:
        return cls(
            values["max_batch_size"],
            tuple(values["preferred"]),
            values["delay_us"],
            values.get("instances", 1),
            values.get("priority_queues", True),
        )


def preferred_options(max_batch_size: int, styles: tuple[str, ...]) -> list[tuple[int, ...]]:
    """Preferred-size sets for one max_batch_size. Styles: 'none' (), 'max' (m,),
    'half' (m/2, m), or explicit sizes such as '4' or '4+8' (sizes above m are dropped)."""
    options = []
    for style in styles:
        if style == "none":
            options.append(())
        elif style == "max":
            options.append((max_batch_size,))
        elif style == "half":
            options.append(tuple(sorted({max(1, max_batch_size // 2), max_batch_size})))
        elif all(part.isdigit() and int(part) > 0 for part in style.split("+")):
            sizes = tuple(sorted({int(part) for part in style.split("+") if int(part) <= max_batch_size}))
            if sizes:
                options.append(sizes)
        else:
            raise ValueError(f"unknown preferred-size style {style!r} (use none, max, half or sizes like 4+8)")
    return list(dict.fromkeys(options))


@dataclass
class SearchSpace:
    max_batch_sizes: list[int]
    delays_us: list[int]
    preferred_styles: tuple[str, ...] = ("none", "half")
    instances: list[int] = field(default_factory=lambda: [1])
    # [True] keeps the committed priority levels and queue policies; [False, True] also tries
    # without them: on Triton 2.51 they cost throughput at low load (README, "The priority-queue tax")
    priority_queues: list[bool] = field(default_factory=lambda: [True])

    def __post_init__(self) -> None:
        if not self.max_batch_sizes or min(self.max_batch_sizes) < 1:
            raise ValueError("max_batch_sizes must be positive")
        if not self.delays_us or min(self.delays_us) < 0:
            raise ValueError("delays must be >= 0 microseconds")
        if not self.instances or min(self.instances) < 1:
            raise ValueError("instance counts must be >= 1")
        self.max_batch_sizes = sorted(set(self.max_batch_sizes))
        self.delays_us = sorted(set(self.delays_us))
        self.instances = sorted(set(self.instances))
        self.priority_queues = sorted({bool(v) for v in self.priority_queues}) or [True]

    def candidates(self) -> list[Candidate]:
        out = []
        axes = itertools.product(self.max_batch_sizes, self.delays_us, self.instances, self.priority_queues)
        for mbs, delay, count, queues in axes:
            out += [Candidate(mbs, preferred, delay, count, queues) for preferred in preferred_options(mbs, self.preferred_styles)]
        return out

    def to_dict(self) -> dict:
        return asdict(self)


def apply_candidate(base: ModelConfig, candidate: Candidate) -> ModelConfig:
    """The base config with the candidate's batching fields; everything else is kept."""
    config = ModelConfig()
    config.CopyFrom(base)
    config.max_batch_size = candidate.max_batch_size
    batcher = config.dynamic_batching
    del batcher.preferred_batch_size[:]
    batcher.preferred_batch_size.extend(candidate.preferred)
    batcher.max_queue_delay_microseconds = candidate.delay_us
    if not candidate.priority_queues:
        config = without_priority_queues(config)
    config = with_instances(config, candidate.instances)
    warmups = [w for w in config.model_warmup if w.batch_size <= candidate.max_batch_size]
    del config.model_warmup[:]
    config.model_warmup.extend(warmups)
    problems = batching_problems(config)
    if problems:
        raise ValueError(f"{candidate.key}: {'; '.join(problems)}")
    return config


def candidate_of(config: ModelConfig) -> Candidate:
    """The committed config as a candidate (the baseline every sweep includes)."""
    instances = sum(group.count or 1 for group in config.instance_group) or 1
    batcher = config.dynamic_batching
    delay = batcher.max_queue_delay_microseconds
    return Candidate(config.max_batch_size, tuple(batcher.preferred_batch_size), delay, instances, has_priority_queues(config))


def machine_cores() -> int:
    """Cores this process may run on (a container's or taskset's limit, not the host's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def instance_count(config: ModelConfig) -> int:
    return sum(group.count or 1 for group in config.instance_group) or 1


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
