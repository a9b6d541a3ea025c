"""One load level of loadgen as the engine's schedule and request mix.

`Traffic` is what the command line describes (concurrency, or a rate with a distribution
and bursts, or a trace; a priority mix; a per-request timeout); `schedule()` and `mix()`
are what the engine (tools/load) runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tools.load.mix import RequestMix
from tools.load.schedules import DISTRIBUTIONS, Bursty, ClosedLoop, Schedule, Trace
from tools.load.traces import read_arrival_offsets


@dataclass(frozen=True)
class Traffic:
    """One load level. `concurrency` > 0 means closed loop; otherwise `rate` (req/s) is open loop.

    Bursty traffic alternates `rate` and `burst_rate` every `burst_period_s / 2`;
    a trace replays recorded arrival offsets (seconds), cycling if the run is longer."""

    concurrency: int = 0
    rate: float = 0.0
    distribution: str = "poisson"
    burst_rate: float = 0.0
    burst_period_s: float = 0.0
    trace: tuple[float, ...] = ()
    priority_mix: dict[int, float] = field(default_factory=dict)  # level -> share; empty: model default
    timeout_us: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.concurrency < 0 or self.rate < 0:
            raise ValueError("concurrency and rate must not be negative")
        if (self.concurrency > 0) == (self.rate > 0 or bool(self.trace)):
            raise ValueError("give either a concurrency (closed loop) or a rate/trace (open loop)")
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(f"distribution must be one of {tuple(DISTRIBUTIONS)}")
        if self.burst_rate and self.burst_period_s <= 0:
            raise ValueError("bursty traffic needs burst_period_s > 0")
        self.schedule()
        self.mix()

    @property
    def closed_loop(self) -> bool:
        return self.concurrency > 0

    def schedule(self) -> Schedule:
        if self.closed_loop:
            return ClosedLoop(self.concurrency)
        if self.trace:
            return Trace(self.trace)
        if self.burst_rate:
            return Bursty(self.rate, self.burst_rate, self.burst_period_s, self.distribution)
        return DISTRIBUTIONS[self.distribution](self.rate)

    def mix(self) -> RequestMix:
        return RequestMix(priorities=self.priority_mix, timeout_us=self.timeout_us, seed=self.seed)

    def label(self) -> str:
        return self.schedule().label()


def parse_priority_mix(text: str) -> dict[int, float]:
    """'1:0.2,2:0.8' -> {1: 0.2, 2: 0.8}."""
    mix = {}
    for part in filter(None, (item.strip() for item in text.split(","))):
        level, _, share = part.partition(":")
        try:
            mix[int(level)] = float(share)
        except ValueError:
            raise ValueError(f"priority mix entry {part!r} is not LEVEL:SHARE") from None
    return mix


def load_trace(path: Path) -> tuple[float, ...]:
    """Arrival offsets in seconds: one per line ('#' comments allowed), or a .csv/.jsonl trace
    (tools/load/traces.py)."""
    return read_arrival_offsets(path)
