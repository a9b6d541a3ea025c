"""What each request is: its kind (which request factory) and its priority level.

Drawn per request index from a seeded generator, so a run's mix is reproducible and the
same index gets the same kind and priority whatever the timing.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

DEFAULT_KIND = "default"
_BLOCK = 4096


def _check_shares(name: str, shares: dict) -> None:
    if any(share < 0 for share in shares.values()):
        raise ValueError(f"{name} shares cannot be negative, got {shares}")
    if shares and abs(sum(shares.values()) - 1.0) > 1e-6:
        raise ValueError(f"{name} shares must add up to 1, got {shares}")


class _Draws:
    """An endless seeded sequence of choices, drawn in blocks."""

    def __init__(self, shares: dict, seed: int) -> None:
        self.values = sorted(shares)
        self.p = [shares[v] for v in self.values]
        self.rng = np.random.default_rng(seed)
        self.drawn: list = []

    def __getitem__(self, index: int) -> Hashable:
        while index >= len(self.drawn):
            self.drawn.extend(self.values[i] for i in self.rng.choice(len(self.values), size=_BLOCK, p=self.p))
        return self.drawn[index]


@dataclass(frozen=True)
class Request:
    index: int
    kind: str = DEFAULT_KIND
    priority: int = 0  # 0: the model's default level
    timeout_us: int | None = None  # Triton's per-request queue timeout (None: the model's)


@dataclass(frozen=True)
class RequestMix:
    """Shares of request kinds and of priority levels (empty: one kind, default level)."""

    kinds: dict[str, float] = field(default_factory=dict)
    priorities: dict[int, float] = field(default_factory=dict)
    timeout_us: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        _check_shares("request kind", self.kinds)
        _check_shares("priority", self.priorities)
        if self.timeout_us is not None and self.timeout_us < 0:
            raise ValueError(f"a per-request timeout cannot be negative, got {self.timeout_us}")

    def requests(self):
        """A function: request index -> Request, the same for the same index and seed."""
        kinds = _Draws(self.kinds, self.seed) if self.kinds else None
        priorities = _Draws(self.priorities, self.seed + 1) if self.priorities else None

        def request(index: int) -> Request:
            kind = kinds[index] if kinds else DEFAULT_KIND
            priority = int(priorities[index]) if priorities else 0
            return Request(index, kind, priority, self.timeout_us)

        return request
