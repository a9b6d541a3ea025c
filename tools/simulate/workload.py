"""What the simulated clients send: the load driver's traffic plus each request's length.

Lengths follow the live run's texts: the load driver's sample texts in its order
(`samples`), the mixed query/passage workload drawn exactly as tools/loadgen draws it
(`mixed`), or one fixed token count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tools.simulate.live_load import LengthMix, Phase, Traffic, arrivals, sample_lengths


@dataclass(frozen=True)
class Lengths:
    kind: str = "samples"  # samples | mixed | fixed
    fixed_tokens: int = 32
    mix: LengthMix = field(default_factory=LengthMix)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("samples", "mixed", "fixed"):
            raise ValueError(f"text lengths must be samples, mixed or fixed:N, got {self.kind!r}")
        if self.kind == "fixed" and self.fixed_tokens < 1:
            raise ValueError(f"a fixed length must be at least 1 token, got {self.fixed_tokens}")

    @classmethod
    def parse(cls, text: str) -> Lengths:
        """'samples', 'mixed' or 'fixed:N'."""
        kind, _, value = text.partition(":")
        if kind == "fixed":
            try:
                return cls("fixed", int(value))
            except ValueError:
                raise ValueError(f"--lengths fixed:N needs a whole number of tokens, got {text!r}") from None
        return cls(kind)

    def tokens(self, count: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(count, self.fixed_tokens, dtype=int)
        if self.kind == "samples":
            base = np.asarray(sample_lengths(), dtype=int)
            return base[np.arange(count) % len(base)]
        out = np.empty(count, dtype=int)
        for index in range(count):  # the same draws as MixedTexts.request(index)
            rng = np.random.default_rng([self.seed, index])
            low, high = self.mix.long_tokens if rng.random() < self.mix.passage_share else self.mix.short_tokens
            out[index] = int(rng.integers(low, high + 1))
        return out

    def describe(self) -> str:
        return {"samples": "the load driver's sample texts", "fixed": f"{self.fixed_tokens} tokens", "mixed": self.mix.describe()}[
            self.kind
        ]


@dataclass(frozen=True)
class Workload:
    traffic: Traffic
    requests: int = 10_000
    lengths: Lengths = field(default_factory=Lengths)
    cache_hit_rate: float = 0.0
    warmup_share: float = 0.1  # the first requests are left out of the figures, as the load driver's warm-up
    window_s: tuple[float, float] | None = None  # open loop: count the requests sent in this span instead (a measurement's window)

    def __post_init__(self) -> None:
        if self.requests < 1:
            raise ValueError(f"the traffic has no requests (--requests {self.requests}); give at least 1")
        if not 0.0 <= self.cache_hit_rate <= 1.0:
            raise ValueError(f"--cache-hit-rate must be within 0..1, got {self.cache_hit_rate:g}")
        if not 0.0 <= self.warmup_share < 1.0:
            raise ValueError(f"the warm-up share must be within 0..1, got {self.warmup_share:g}")

    def arrivals_ms(self) -> np.ndarray:
        """Open loop: send times of exactly `requests` requests (a trace cycles)."""
        traffic = self.traffic
        if traffic.trace:
            base = np.asarray(sorted(traffic.trace), dtype=float)
            span = max(base[-1], 1e-3)
            cycles = int(np.ceil(self.requests / len(base)))
            offsets = np.concatenate([base + i * span for i in range(cycles)])[: self.requests]
            return offsets * 1000.0
        rate = max(traffic.rate, traffic.burst_rate)
        duration = self.requests / traffic.rate * 1.5 + 1.0
        while True:
            offsets = arrivals([Phase(traffic.schedule(), duration)], traffic.seed)  # as the load driver sends them
            if len(offsets) >= self.requests or rate <= 0:
                return offsets[: self.requests] * 1000.0
            duration *= 2
