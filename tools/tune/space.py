"""The search space of a sweep: candidate batching configs (tools/repo/candidate.py) over a grid.

Preferred batch sizes are derived per max_batch_size (never above it), so the space holds
no candidate Triton would refuse to load.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field

from tools.repo.candidate import Candidate


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
