"""What the simulator needs from a model's config.pbtxt, and what it cannot represent.

Read through the protobuf schema (tools/repo/model_config.py), so a config the simulator
accepts is one Triton could load; anything whose scheduling the simulator does not model
(sequence batching, an ensemble passed as a step) is refused with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tools.repo.instances import instance_count
from tools.repo.model_config import ModelConfig, batching_problems, has_priority_queues

REJECT, DELAY = "REJECT", "DELAY"


class UnrepresentableConfig(ValueError):
    """A config whose scheduling the simulator does not model."""


@dataclass(frozen=True)
class QueuePolicy:
    """One priority level's `ModelQueuePolicy` (0 means unbounded / no timeout, as in Triton)."""

    max_queue_size: int = 0
    default_timeout_us: int = 0
    timeout_action: str = REJECT
    allow_timeout_override: bool = False

    def timeout_us(self, requested_us: int | None) -> int:
        """The timeout a request gets: Triton applies a request's own timeout only when the
        level has a default and overrides are allowed, and only below the default."""
        if not self.default_timeout_us:
            return 0
        if requested_us and self.allow_timeout_override:
            return min(requested_us, self.default_timeout_us)
        return self.default_timeout_us


@dataclass(frozen=True)
class BatcherSpec:
    """One model's scheduling: its dynamic batcher (or none), instances and input shapes."""

    name: str = "model"
    max_batch_size: int = 1
    dynamic: bool = True  # False: no dynamic_batching, every request runs alone
    preferred: tuple[int, ...] = ()
    delay_us: int = 0
    instances: int = 1
    priority_levels: int = 0  # 0: one queue
    default_level: int = 1
    policies: dict[int, QueuePolicy] = field(default_factory=dict)  # level -> policy (level 1 when no levels)
    ragged: bool = False  # allow_ragged_batch: any lengths join one execution
    ragged_split: bool = False  # our backend splits a ragged execution by cost (ragged_split: cost)
    priority_queues: bool = False  # levels or queue policies configured: Triton 2.51 cannot prefetch

    @property
    def levels(self) -> list[int]:
        return list(range(1, max(1, self.priority_levels) + 1))

    @property
    def max_preferred(self) -> int:
        return max(self.preferred) if self.preferred else self.max_batch_size

    def level_of(self, priority: int) -> int:
        """Queue level of a request's priority (0 or out of range: the default level)."""
        if not self.priority_levels:
            return 1
        return priority if 1 <= priority <= self.priority_levels else self.default_level

    def policy(self, level: int) -> QueuePolicy:
        return self.policies.get(level, self.policies.get(0, QueuePolicy()))

    @classmethod
    def from_config(cls, config: ModelConfig) -> BatcherSpec:
        name = config.name or "model"
        if config.platform == "ensemble" or config.HasField("ensemble_scheduling"):
            raise UnrepresentableConfig(f"{name} is an ensemble: pass the config of a step it runs (e.g. the encoder's)")
        if config.HasField("sequence_batching"):
            raise UnrepresentableConfig(f"{name} uses sequence_batching, which the simulator does not model")
        problems = batching_problems(config)
        if problems:
            raise UnrepresentableConfig(f"{name}: {'; '.join(problems)}")
        instances = instance_count(config)
        dynamic = config.HasField("dynamic_batching")
        if config.max_batch_size < 1 and dynamic:
            raise UnrepresentableConfig(f"{name}: dynamic_batching needs max_batch_size >= 1")
        batcher = config.dynamic_batching
        policies = {0: _policy(batcher.default_queue_policy)} if batcher.HasField("default_queue_policy") else {}
        for level, policy in batcher.priority_queue_policy.items():
            policies[int(level)] = _policy(policy)
        if 0 in policies and not batcher.priority_levels:
            policies[1] = policies[0]
        inputs = list(config.input)
        ragged = bool(inputs) and all(tensor.allow_ragged_batch for tensor in inputs)
        split = config.parameters["ragged_split"].string_value == "cost" if "ragged_split" in config.parameters else False
        return cls(
            name=name,
            max_batch_size=max(1, config.max_batch_size),
            dynamic=dynamic,
            preferred=tuple(sorted(set(batcher.preferred_batch_size))),
            delay_us=int(batcher.max_queue_delay_microseconds),
            instances=instances,
            priority_levels=int(batcher.priority_levels),
            default_level=int(batcher.default_priority_level or 1),
            policies=policies,
            ragged=ragged,
            ragged_split=ragged and split,
            priority_queues=dynamic and has_priority_queues(config),
        )


def _policy(policy) -> QueuePolicy:
    action = DELAY if policy.timeout_action == policy.DELAY else REJECT
    return QueuePolicy(int(policy.max_queue_size), int(policy.default_timeout_microseconds), action, bool(policy.allow_timeout_override))
