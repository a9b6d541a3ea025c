"""Load results: latency percentiles, outcomes per priority class, server-side batching."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from tools.stats import ModelStats

OK = "ok"


def classify_error(message: str) -> str:
    """Outcome names for Triton's error messages: rejections and timeouts are load-shedding,
    not bugs, and are counted apart from other errors."""
    text = message.lower()
    if "exceeds maximum queue size" in text or "queue size" in text:
        return "rejected"
    if "timeout" in text or "timed out" in text or "deadline" in text:
        return "timeout"
    if "unavailable" in text or "connect" in text:
        return "unavailable"
    return "error"


@dataclass
class LatencySummary:
    count: int = 0
    mean_ms: float = 0.0
    p50_ms: float = 0.0
    p90_ms: float = 0.0
    p95_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0

    @classmethod
    def of(cls, latencies_s: np.ndarray) -> LatencySummary:
        if len(latencies_s) == 0:
            return cls()
        ms = np.asarray(latencies_s) * 1000.0
        p50, p90, p95, p99 = np.percentile(ms, [50, 90, 95, 99])
        return cls(len(ms), float(ms.mean()), float(p50), float(p90), float(p95), float(p99), float(ms.max()))


@dataclass
class ClassResult:
    """One priority class (0 = the model's default level)."""

    sent: int
    outcomes: dict[str, int]
    latency: LatencySummary
    throughput_rps: float


@dataclass
class ServerWindow:
    """The server's own figures over the measured window (deltas of the statistics API)."""

    requests: int
    inferences: int
    executions: int
    average_batch_size: float
    batch_executions: dict[int, int]
    average_queue_ms: float
    average_compute_ms: float
    cache_hits: int
    failures: int

    @classmethod
    def of(cls, delta: ModelStats) -> ServerWindow:
        return cls(
            delta.requests,
            delta.inferences,
            delta.executions,
            delta.average_batch_size,
            dict(delta.batch_executions),
            delta.average_queue_ms,
            delta.average_compute_ms,
            delta.cache_hits,
            delta.failures,
        )


@dataclass
class LoadResult:
    traffic: str
    target: str
    protocol: str
    measured_s: float
    windows: int
    stable: bool
    sent: int
    outcomes: dict[str, int]
    throughput_rps: float  # successful requests per second
    rows_per_s: float  # successful rows (texts) per second
    latency: LatencySummary  # successful requests only
    per_priority: dict[int, ClassResult]
    late_sends: int  # open loop: arrivals sent more than 10 ms after their scheduled time
    max_send_lag_ms: float
    server: dict[str, ServerWindow] = field(default_factory=dict)
    run_sent: int = 0  # the whole run, warm-up included: every request sent ...
    run_outcomes: dict[str, int] = field(default_factory=dict)  # ... and its outcome (nothing left unanswered)
    per_length_class: dict[str, ClassResult] = field(default_factory=dict)  # mixed-length targets only
    useful_tokens_per_s: float | None = None  # real tokens of successful requests; None: target has no token counts

    @property
    def error_count(self) -> int:
        return sum(count for outcome, count in self.outcomes.items() if outcome != OK)

    def to_dict(self) -> dict:
        return asdict(self)

    def one_line(self) -> str:
        server = " ".join(f"{name}: batch {window.average_batch_size:.2f}" for name, window in self.server.items())
        errors = ", ".join(f"{k} {v}" for k, v in self.outcomes.items() if k != OK) or "no errors"
        return (
            f"{self.traffic:>28}: {self.throughput_rps:7.1f} req/s  p50 {self.latency.p50_ms:7.1f} ms  "
            f"p99 {self.latency.p99_ms:7.1f} ms  {errors}  {server}{'' if self.stable else '  (not stable)'}"
        )


def summarise_classes(priorities: np.ndarray, outcomes: list[str], latencies: np.ndarray, seconds: float) -> dict[int, ClassResult]:
    classes = {}
    for level in sorted(set(priorities.tolist())):
        chosen = priorities == level
        chosen_outcomes = [outcome for outcome, keep in zip(outcomes, chosen) if keep]
        ok = np.array([outcome == OK for outcome in chosen_outcomes], dtype=bool)
        counts: dict[str, int] = {}
        for outcome in chosen_outcomes:
            counts[outcome] = counts.get(outcome, 0) + 1
        classes[int(level)] = ClassResult(
            sent=int(chosen.sum()),
            outcomes=counts,
            latency=LatencySummary.of(latencies[chosen][ok]),
            throughput_rps=float(ok.sum() / seconds) if seconds else 0.0,
        )
    return classes
