"""Statistics over per-request records: the one percentile helper and the one results type.

"No samples" has one meaning everywhere: no value (None, JSON null), never 0.0, NaN or a
missing key. A latency of 0.0 for a class that got no answers reads as "fast".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from tools.load.outcomes import OK


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0..100, linear interpolation as numpy's default); None without samples."""
    data = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=float)
    if data.size == 0:
        return None
    return float(np.percentile(data, q))


def format_ms(value: float | None, spec: str = ".1f") -> str:
    """A latency (or another average) for a table or a log line: "-" when there is no value."""
    return "-" if value is None else format(value, spec)


@dataclass
class LatencySummary:
    """Latency of successful requests in ms. With no sample every figure is None."""

    count: int = 0
    mean_ms: float | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None

    @classmethod
    def of(cls, latencies_s: Iterable[float]) -> LatencySummary:
        ms = np.asarray(list(latencies_s) if not isinstance(latencies_s, np.ndarray) else latencies_s, dtype=float) * 1000.0
        if ms.size == 0:
            return cls()
        p50, p90, p95, p99 = (percentile(ms, q) for q in (50, 90, 95, 99))
        return cls(int(ms.size), float(ms.mean()), p50, p90, p95, p99, float(ms.max()))

    def rounded(self, digits: int = 1) -> dict:
        """The figures rounded for a report; None stays None."""
        return {k: (v if v is None or k == "count" else round(v, digits)) for k, v in asdict(self).items()}


@dataclass
class ClassResult:
    """One class of requests (a priority level, a request kind, a length class)."""

    sent: int
    outcomes: dict[str, int]
    latency: LatencySummary
    throughput_rps: float  # successful requests per second


@dataclass(frozen=True)
class Sample:
    """What the statistics need of one request (tools.load.driver.Record satisfies it)."""

    latency_s: float
    outcome: str
    priority: int = 0
    kind: str = ""
    rows: int = 1
    tokens: int | None = None
    label: str = ""


def _rate(count: float, seconds: float) -> float:
    return float(count / seconds) if seconds > 0 else 0.0


def class_result(records: Sequence, seconds: float) -> ClassResult:
    outcomes = dict(Counter(r.outcome for r in records))
    ok = [r.latency_s for r in records if r.outcome == OK]
    return ClassResult(len(records), outcomes, LatencySummary.of(ok), _rate(len(ok), seconds))


def by_class(records: Sequence, seconds: float, key: Callable[[object], Hashable]) -> dict:
    groups: dict = {}
    for record in records:
        groups.setdefault(key(record), []).append(record)
    return {name: class_result(groups[name], seconds) for name in sorted(groups)}


@dataclass
class Results:
    """Everything a load tool reports about a set of requests over `seconds`: counts per
    outcome, throughput, latency of the successful ones, and the same per priority level,
    per request kind and per length class (labels)."""

    seconds: float
    sent: int
    outcomes: dict[str, int]
    throughput_rps: float
    rows_per_s: float
    latency: LatencySummary
    per_priority: dict[int, ClassResult] = field(default_factory=dict)
    per_kind: dict[str, ClassResult] = field(default_factory=dict)
    per_label: dict[str, ClassResult] = field(default_factory=dict)  # only when requests carry a label
    useful_tokens_per_s: float | None = None  # real tokens of successful requests; None: tokens unknown

    @classmethod
    def of(cls, records: Sequence, seconds: float) -> Results:
        ok = [r for r in records if r.outcome == OK]
        counted = [r.tokens for r in records if r.tokens is not None]
        tokens = sum(r.tokens for r in ok if r.tokens is not None)
        return cls(
            seconds=seconds,
            sent=len(records),
            outcomes=dict(Counter(r.outcome for r in records)),
            throughput_rps=_rate(len(ok), seconds),
            rows_per_s=_rate(sum(r.rows for r in ok), seconds),
            latency=LatencySummary.of([r.latency_s for r in ok]),
            per_priority=by_class(records, seconds, lambda r: int(r.priority)),
            per_kind=by_class(records, seconds, lambda r: r.kind),
            per_label=by_class(records, seconds, lambda r: r.label) if any(r.label for r in records) else {},
            useful_tokens_per_s=_rate(tokens, seconds) if counted else None,
        )

    @property
    def failed(self) -> int:
        return sum(count for outcome, count in self.outcomes.items() if outcome != OK)
