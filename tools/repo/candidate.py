"""The batching candidate: the fields a sweep varies, and how they are written into a config.

Preferred batch sizes are always set together with max_batch_size (never above it), so a
candidate can never be one Triton refuses to load, a failure users report from tools that
sweep the two independently. The tuner, the presets, the planner and the simulator share
this one definition.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tools.repo.instances import with_instances
from tools.repo.model_config import ModelConfig, batching_problems, has_priority_queues, without_priority_queues


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
