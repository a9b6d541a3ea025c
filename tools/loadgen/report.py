"""Loadgen's report of one load level: the engine's Results over the steady windows, plus
the server's own batching figures over the same windows."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from tools.load.outcomes import OK, REJECTED, TIMEOUT
from tools.load.results import ClassResult, LatencySummary, format_ms
from tools.triton_client.stats import ModelStats

__all__ = ["ClassResult", "LatencySummary", "LoadResult", "ServerWindow", "format_ms"]


@dataclass
class ServerWindow:
    """The server's own figures over the measured window (deltas of the statistics API).
    Averages are None when there was nothing to average (no execution, no successful request)."""

    requests: int
    inferences: int
    executions: int
    average_batch_size: float | None
    batch_executions: dict[int, int]
    average_queue_ms: float | None
    average_compute_ms: float | None
    cache_hits: int
    failures: int

    @classmethod
    def of(cls, delta: ModelStats) -> ServerWindow:
        per_request = delta.requests > 0
        return cls(
            delta.requests,
            delta.inferences,
            delta.executions,
            delta.average_batch_size if delta.executions else None,
            dict(delta.batch_executions),
            delta.average_queue_ms if per_request else None,
            delta.average_compute_ms if per_request else None,
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
    run_per_priority: dict[int, ClassResult] = field(default_factory=dict)  # the whole run per class
    open_loop: bool = False  # late sends and send lag mean something only on a schedule
    per_length_class: dict[str, ClassResult] = field(default_factory=dict)  # mixed-length targets only
    useful_tokens_per_s: float | None = None  # real tokens of successful requests; None: target has no token counts

    @property
    def error_count(self) -> int:
        return sum(count for outcome, count in self.outcomes.items() if outcome != OK)

    def to_dict(self) -> dict:
        return asdict(self)

    def one_line(self) -> str:
        server = " ".join(f"{name}: batch {format_ms(window.average_batch_size, '.2f')}" for name, window in self.server.items())
        errors = ", ".join(f"{k} {v}" for k, v in self.outcomes.items() if k != OK) or "no errors"
        return (
            f"{self.traffic:>28}: {self.throughput_rps:7.1f} req/s  p50 {format_ms(self.latency.p50_ms):>7} ms  "
            f"p99 {format_ms(self.latency.p99_ms):>7} ms  {errors}  {server}{'' if self.stable else '  (not stable)'}"
        )

    def table(self) -> str:
        """The terminal report: what --json holds, in a few aligned lines."""
        lines = [
            f"{self.traffic} | {self.target} | {self.protocol} | measured {self.measured_s:.1f} s over {self.windows} window(s), "
            + ("stable" if self.stable else "NOT stable (spread above --stability)"),
            f"  {self.throughput_rps:.1f} req/s, {self.rows_per_s:.1f} rows/s"
            + (f"; sends late by > 10 ms: {self.late_sends} (max lag {self.max_send_lag_ms:.1f} ms)" if self.open_loop else ""),
            f"  {'class':<11}{'sent':>7}{'ok':>7}{'rejected':>9}{'timeout':>8}{'other':>7}"
            f"{'p50':>8}{'p90':>8}{'p95':>8}{'p99':>8}{'max':>8}  (ms, successful requests)",
        ]
        lines.append(_class_row("all", self.sent, self.outcomes, self.latency))
        if set(self.per_priority) != {0}:
            lines += [_class_row(f"priority {level}", c.sent, c.outcomes, c.latency) for level, c in sorted(self.per_priority.items())]
        if self.server:
            lines.append(
                f"  {'server':<11}{'requests':>9}{'execs':>7}{'avg batch':>10}{'queue ms':>9}{'compute ms':>11}"
                f"{'cache hits':>11}{'failures':>9}  executed batch sizes (size:executions)"
            )
            for name, w in self.server.items():
                histogram = " ".join(f"{size}:{count}" for size, count in sorted(w.batch_executions.items())) or "-"
                queue, compute = format_ms(w.average_queue_ms), format_ms(w.average_compute_ms)
                averages = f"{format_ms(w.average_batch_size, '.2f'):>10}{queue:>9}{compute:>11}"
                lines.append(f"  {name:<11}{w.requests:>9}{w.executions:>7}{averages}{w.cache_hits:>11}{w.failures:>9}  {histogram}")
        answered = sum(self.run_outcomes.values())
        lines.append(
            f"  whole run, warm-up included: {self.run_sent} sent, {answered} answered"
            + "".join(f", {k} {v}" for k, v in sorted(self.run_outcomes.items()))
        )
        return "\n".join(lines)


def _class_row(name: str, sent: int, outcomes: dict[str, int], latency: LatencySummary) -> str:
    known = (OK, REJECTED, TIMEOUT)
    other = sum(count for outcome, count in outcomes.items() if outcome not in known)
    percentiles = (latency.p50_ms, latency.p90_ms, latency.p95_ms, latency.p99_ms, latency.max_ms)
    figures = "".join(f"{format_ms(value):>8}" for value in percentiles)
    return f"  {name:<11}{sent:>7}{outcomes.get(OK, 0):>7}{outcomes.get(REJECTED, 0):>9}{outcomes.get(TIMEOUT, 0):>8}{other:>7}" + figures
