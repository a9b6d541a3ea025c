"""What load to send: closed loop (N clients) or open-loop arrival times.

Open-loop arrivals are computed up front from a seeded generator, so a schedule is
reproducible and two configs can be compared under exactly the same arrivals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

DISTRIBUTIONS = ("poisson", "constant")


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
            raise ValueError(f"distribution must be one of {DISTRIBUTIONS}")
        if self.burst_rate and self.burst_period_s <= 0:
            raise ValueError("bursty traffic needs burst_period_s > 0")
        if self.priority_mix and abs(sum(self.priority_mix.values()) - 1.0) > 1e-6:
            raise ValueError(f"priority shares must add up to 1, got {self.priority_mix}")

    @property
    def closed_loop(self) -> bool:
        return self.concurrency > 0

    def label(self) -> str:
        if self.closed_loop:
            return f"concurrency {self.concurrency}"
        if self.trace:
            return f"trace ({len(self.trace)} arrivals)"
        if self.burst_rate:
            return f"bursty {self.rate:g}/{self.burst_rate:g} req/s every {self.burst_period_s:g} s"
        return f"{self.distribution} {self.rate:g} req/s"

    def rate_at(self, t: float) -> float:
        if self.burst_rate and (t % self.burst_period_s) >= self.burst_period_s / 2:
            return self.burst_rate
        return self.rate

    def arrivals(self, duration_s: float) -> np.ndarray:
        """Send offsets (seconds from the start) covering `duration_s`."""
        if self.trace:
            base = np.asarray(sorted(self.trace), dtype=float)
            span = max(base[-1], 1e-3)
            cycles = int(np.ceil(duration_s / span))
            offsets = np.concatenate([base + i * span for i in range(cycles)])
            return offsets[offsets < duration_s]
        rng = np.random.default_rng(self.seed)
        offsets, t = [], 0.0
        while True:
            rate = self.rate_at(t)
            t += rng.exponential(1.0 / rate) if self.distribution == "poisson" else 1.0 / rate
            if t >= duration_s:
                return np.asarray(offsets)
            offsets.append(t)

    def priorities(self, count: int) -> np.ndarray:
        """Priority per request (0 = the model's default level), drawn with the seed."""
        if not self.priority_mix:
            return np.zeros(count, dtype=int)
        levels = sorted(self.priority_mix)
        rng = np.random.default_rng(self.seed + 1)
        return rng.choice(levels, size=count, p=[self.priority_mix[level] for level in levels])


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
    """Arrival offsets in seconds, one per line ('#' comments allowed)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ValueError(f"cannot read the trace file {path}: {exc.strerror or exc}") from None
    values = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if line:
            try:
                values.append(float(line))
            except ValueError:
                raise ValueError(f"{path}:{number}: {line!r} is not a number of seconds") from None
            if values[-1] < 0:
                raise ValueError(f"{path}:{number}: an arrival offset cannot be negative ({line})")
    if not values:
        raise ValueError(f"{path} holds no arrival offsets")
    return tuple(values)
