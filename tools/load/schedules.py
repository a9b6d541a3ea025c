"""When requests leave: closed loop (N clients) or open-loop arrival offsets, in phases.

Open-loop offsets are drawn up front from a seeded generator, so a schedule is
reproducible and two configs can be compared under exactly the same arrivals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np


@dataclass(frozen=True)
class ClosedLoop:
    """`concurrency` clients, each sending its next request when the last one returns; with
    `requests`, the phase ends once that many were sent (and answered)."""

    concurrency: int
    requests: int | None = None

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"a closed loop needs at least 1 client, got {self.concurrency}")
        if self.requests is not None and self.requests < 1:
            raise ValueError(f"a closed loop of a fixed count needs at least 1 request, got {self.requests}")

    def label(self) -> str:
        return f"concurrency {self.concurrency}" + (f", {self.requests} requests" if self.requests else "")


def _check_rate(rate: float) -> None:
    if not 0 < rate < math.inf:
        raise ValueError(f"an arrival rate must be above 0 req/s, got {rate:g}")


@dataclass(frozen=True)
class _Rate:
    rate: float
    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        _check_rate(self.rate)

    def label(self) -> str:
        return f"{self.name} {self.rate:g} req/s"


@dataclass(frozen=True)
class Poisson(_Rate):
    """Exponential gaps at `rate` req/s: independent users."""

    name: ClassVar[str] = "poisson"

    def offsets(self, seconds: float, rng: np.random.Generator) -> np.ndarray:
        return _gaps(lambda t: rng.exponential(1.0 / self.rate), seconds)


@dataclass(frozen=True)
class Gamma(_Rate):
    """Gamma-distributed gaps at `rate` req/s, as `vllm bench serve --burstiness` draws them:
    shape = burstiness, scale = 1 / (rate * burstiness), so the mean gap is 1/rate and the
    gaps' coefficient of variation is 1/sqrt(burstiness). Burstiness 1 is Poisson; below 1
    arrivals bunch up (bursts and lulls), above 1 they even out towards a constant rate."""

    burstiness: float = 1.0
    name: ClassVar[str] = "gamma"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.burstiness < math.inf:
            raise ValueError(f"burstiness must be above 0 (1: Poisson), got {self.burstiness:g}")

    def offsets(self, seconds: float, rng: np.random.Generator) -> np.ndarray:
        shape, scale = self.burstiness, 1.0 / (self.rate * self.burstiness)
        return _gaps(lambda t: rng.gamma(shape, scale), seconds)

    def label(self) -> str:
        return f"gamma {self.rate:g} req/s, burstiness {self.burstiness:g}"


@dataclass(frozen=True)
class Constant(_Rate):
    """Evenly spaced arrivals at `rate` req/s."""

    name: ClassVar[str] = "constant"

    def offsets(self, seconds: float, rng: np.random.Generator) -> np.ndarray:
        offsets = np.arange(1, int(seconds * self.rate) + 2) / self.rate  # k / rate: no accumulated rounding
        return offsets[offsets < seconds]


@dataclass(frozen=True)
class Bursty:
    """`rate` for the first half of every `period_s`, `burst_rate` for the second half."""

    rate: float
    burst_rate: float
    period_s: float
    distribution: str = "poisson"

    def __post_init__(self) -> None:
        _check_rate(self.rate)
        _check_rate(self.burst_rate)
        if self.period_s <= 0:
            raise ValueError("bursty traffic needs a period (burst_period_s) above 0")
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(f"distribution must be one of {tuple(DISTRIBUTIONS)}")

    def rate_at(self, t: float) -> float:
        return self.burst_rate if (t % self.period_s) >= self.period_s / 2 else self.rate

    def offsets(self, seconds: float, rng: np.random.Generator) -> np.ndarray:
        if self.distribution == "poisson":
            return _gaps(lambda t: rng.exponential(1.0 / self.rate_at(t)), seconds)
        return _gaps(lambda t: 1.0 / self.rate_at(t), seconds)

    def label(self) -> str:
        return f"bursty {self.rate:g}/{self.burst_rate:g} req/s every {self.period_s:g} s"


@dataclass(frozen=True)
class Trace:
    """Recorded arrival offsets (seconds), cycled when the phase is longer than the trace."""

    arrivals: tuple[float, ...]
    cycle: bool = True

    def __post_init__(self) -> None:
        if not len(self.arrivals):
            raise ValueError("a trace needs at least one arrival offset")
        if min(self.arrivals) < 0:
            raise ValueError("an arrival offset cannot be negative")

    @property
    def span_s(self) -> float:
        return max(max(self.arrivals), 1e-3)

    def offsets(self, seconds: float, rng: np.random.Generator) -> np.ndarray:
        base = np.asarray(sorted(self.arrivals), dtype=float)
        cycles = max(1, int(np.ceil(seconds / self.span_s))) if self.cycle else 1
        offsets = np.concatenate([base + i * self.span_s for i in range(cycles)])
        return offsets[offsets < seconds]

    def label(self) -> str:
        return f"trace ({len(self.arrivals)} arrivals)"


DISTRIBUTIONS = {"poisson": Poisson, "constant": Constant}
OpenLoop = Poisson | Gamma | Constant | Bursty | Trace
Schedule = ClosedLoop | OpenLoop


def _gaps(gap, seconds: float) -> np.ndarray:
    offsets, t = [], 0.0
    while True:
        t += gap(t)
        if t >= seconds:
            return np.asarray(offsets, dtype=float)
        offsets.append(t)


@dataclass(frozen=True)
class Phase:
    """One schedule for `seconds`. A closed-loop phase ends when its clients have stopped
    (their last requests returned), so its concurrency is never exceeded."""

    schedule: Schedule
    seconds: float
    name: str = ""

    def __post_init__(self) -> None:
        if not 0 < self.seconds < math.inf:
            raise ValueError(f"a phase must last a finite time above 0 s, got {self.seconds:g}")

    @property
    def closed_loop(self) -> bool:
        return isinstance(self.schedule, ClosedLoop)

    def label(self) -> str:
        return self.name or self.schedule.label()


def arrivals(phases: Sequence[Phase], seed: int = 0) -> np.ndarray:
    """Every open-loop phase's offsets shifted by the phase's start, from one seeded generator
    (what the engine sends when no phase runs late); closed-loop phases add none."""
    rng = np.random.default_rng(seed)
    parts, start = [], 0.0
    for phase in phases:
        if not phase.closed_loop:
            parts.append(phase.schedule.offsets(phase.seconds, rng) + start)
        start += phase.seconds
    return np.concatenate(parts) if parts else np.zeros(0)


def phase_index(phases: Sequence[Phase], t: float) -> int:
    """The phase a time offset falls in (the last one past the end)."""
    start = 0.0
    for index, phase in enumerate(phases):
        if t < start + phase.seconds:
            return index
        start += phase.seconds
    return len(phases) - 1
