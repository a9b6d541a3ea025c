"""The figures of one load level: throughput, TTFT, TPOT, ITL and goodput under an SLO.

Goodput follows DistServe (OSDI 2024) and `vllm bench serve --goodput`: a request counts
when it completed and met every objective (its own TTFT and its own TPOT), and goodput is
those requests per second of the level. Output tokens/s counts every token received,
including those of requests cut at the end. Both divide by the level's whole duration,
from its start to its last answer (or the drain limit), as `vllm bench serve` does.
Percentiles come from tools.load.results.percentile (None without samples).

`LevelFigures` is the benchmark's compact row; `LoadFigures` is the load generator's full
summary: every latency metric's distribution (avg, min, max, p50, p90, p99), named as
GenAI-Perf names its metrics where the definitions agree.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from tools.load.llm.records import StreamRecord
from tools.load.results import percentile


@dataclass(frozen=True)
class Slo:
    """Per-request objectives in seconds; None: not an objective. A request meets the SLO when
    it completed and met every objective that is set (a request with one token has no TPOT,
    which no TPOT objective can fail)."""

    ttft_s: float | None = 1.0
    tpot_s: float | None = 0.100
    e2e_s: float | None = None

    def __post_init__(self) -> None:
        if all(value is None for value in (self.ttft_s, self.tpot_s, self.e2e_s)):
            raise ValueError("an SLO needs at least one objective (ttft, tpot or e2el)")
        if any(value is not None and not value > 0 for value in (self.ttft_s, self.tpot_s, self.e2e_s)):
            raise ValueError(f"SLO objectives must be above 0 s, got {self}")

    def met_by(self, record: StreamRecord) -> bool:
        if not record.completed:
            return False
        ttft, tpot, e2e = record.ttft_s, record.tpot_s, record.e2e_s
        if self.ttft_s is not None and (ttft is None or ttft > self.ttft_s):
            return False
        if self.tpot_s is not None and tpot is not None and tpot > self.tpot_s:
            return False
        return self.e2e_s is None or (e2e is not None and e2e <= self.e2e_s)

    def describe(self) -> str:
        names = (("TTFT", self.ttft_s), ("TPOT", self.tpot_s), ("E2E", self.e2e_s))
        return " and ".join(f"{name} <= {value * 1000:g} ms" for name, value in names if value is not None) + ", per request"

    @classmethod
    def parse(cls, text: str) -> Slo:
        """'ttft=1,tpot=0.1' (seconds); an objective left out keeps its default."""
        values = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            if not sep or key not in ("ttft", "tpot"):
                raise ValueError(f"an SLO is ttft=SECONDS,tpot=SECONDS, got {text!r}")
            values[f"{key}_s"] = float(value)
        return cls(**values)

    @classmethod
    def parse_goodput(cls, items: Sequence[str]) -> Slo:
        """`vllm bench serve --goodput`'s spelling: 'ttft:1000 tpot:100 e2el:5000', in ms
        (commas separate too); only the objectives named count."""
        keys = {"ttft": "ttft_s", "tpot": "tpot_s", "e2el": "e2e_s"}
        values: dict[str, float | None] = dict.fromkeys(keys.values())
        for part in (p.strip() for item in items for p in item.split(",")):
            if not part:
                continue
            key, sep, value = part.partition(":")
            try:
                if not sep or key not in keys:
                    raise ValueError
                values[keys[key]] = float(value) / 1000.0
            except ValueError:
                raise ValueError(f"a goodput objective is ttft:MS, tpot:MS or e2el:MS, got {part!r}") from None
        return cls(**values)


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000.0, 1)


@dataclass(frozen=True)
class LevelFigures:
    """One target at one load level. Latencies in ms; None: no sample."""

    requests: int  # sent
    completed: int
    outcomes: dict[str, int]
    duration_s: float
    output_tokens_per_s: float
    requests_per_s: float  # completed
    goodput_rps: float
    good_share: float | None  # good / sent
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None
    itl_p99_ms: float | None
    e2e_p50_ms: float | None
    mean_tokens_in: float | None
    mean_tokens_out: float | None

    @classmethod
    def of(cls, records: Sequence[StreamRecord], duration_s: float, slo: Slo) -> LevelFigures:
        done = [r for r in records if r.completed]
        ttft = [r.ttft_s for r in done if r.ttft_s is not None]
        tpot = [r.tpot_s for r in done if r.tpot_s is not None]
        itl = [gap for r in done for gap in r.itl_s]
        good = sum(1 for r in records if slo.met_by(r))
        tokens = sum(r.tokens_out for r in records)
        tokens_in = [r.tokens_in for r in done if r.tokens_in is not None]
        per_s = (lambda n: n / duration_s) if duration_s > 0 else (lambda n: 0.0)
        return cls(
            requests=len(records),
            completed=len(done),
            outcomes=dict(Counter(r.outcome for r in records)),
            duration_s=round(duration_s, 2),
            output_tokens_per_s=round(per_s(tokens), 2),
            requests_per_s=round(per_s(len(done)), 3),
            goodput_rps=round(per_s(good), 3),
            good_share=round(good / len(records), 3) if records else None,
            ttft_p50_ms=_ms(percentile(ttft, 50)),
            ttft_p99_ms=_ms(percentile(ttft, 99)),
            tpot_p50_ms=_ms(percentile(tpot, 50)),
            tpot_p99_ms=_ms(percentile(tpot, 99)),
            itl_p99_ms=_ms(percentile(itl, 99)),
            e2e_p50_ms=_ms(percentile([r.e2e_s for r in done if r.e2e_s is not None], 50)),
            mean_tokens_in=round(sum(tokens_in) / len(tokens_in), 1) if tokens_in else None,
            mean_tokens_out=round(sum(r.tokens_out for r in done) / len(done), 1) if done else None,
        )

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Distribution:
    """avg/min/max/std and percentiles of one metric's samples, in its unit; every figure None
    without samples."""

    count: int = 0
    avg: float | None = None
    min: float | None = None
    max: float | None = None
    std: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None

    @classmethod
    def of(cls, values: Sequence[float], scale: float = 1.0) -> Distribution:
        data = [float(v) * scale for v in values]
        if not data:
            return cls()
        mean = sum(data) / len(data)
        std = math.sqrt(sum((v - mean) ** 2 for v in data) / len(data))
        p50, p90, p99 = (percentile(data, q) for q in (50, 90, 99))
        return cls(len(data), mean, min(data), max(data), std, p50, p90, p99)


MS = 1000.0


@dataclass(frozen=True)
class LoadFigures:
    """One load level's figures, every latency in ms.

    - ttft: send to first token; tpot: per request, (last token - first token) / (tokens - 1),
      vLLM's TPOT and GenAI-Perf's inter_token_latency (requests with >= 2 tokens);
      itl: every gap between successive tokens (vLLM's ITL); e2e: send to end.
    - output_tokens_per_s counts every token received; requests_per_s the completed requests;
      goodput_rps those that met the SLO (DistServe); all over `duration_s`.
    """

    requests: int
    completed: int
    outcomes: dict[str, int]
    duration_s: float
    output_tokens_per_s: float
    requests_per_s: float
    goodput_rps: float
    good_share: float | None
    slo: str
    ttft: Distribution
    tpot: Distribution
    itl: Distribution
    e2e: Distribution
    tokens_in: Distribution
    tokens_out: Distribution
    output_tokens_per_s_per_user: Distribution  # per request: (tokens - 1) / (last - first token), GenAI-Perf's per-user figure
    late_sends: int = 0
    arrival_lag: Distribution = Distribution()  # open loop: send minus scheduled arrival, ms

    @classmethod
    def of(cls, records: Sequence[StreamRecord], duration_s: float, slo: Slo, late_sends: int = 0) -> LoadFigures:
        done = [r for r in records if r.completed]
        good = sum(1 for r in records if slo.met_by(r))
        per_s = (lambda n: n / duration_s) if duration_s > 0 else (lambda n: 0.0)
        tpot = [r.tpot_s for r in done if r.tpot_s is not None]
        return cls(
            requests=len(records),
            completed=len(done),
            outcomes=dict(Counter(r.outcome for r in records)),
            duration_s=duration_s,
            output_tokens_per_s=per_s(sum(r.tokens_out for r in records)),
            requests_per_s=per_s(len(done)),
            goodput_rps=per_s(good),
            good_share=good / len(records) if records else None,
            slo=slo.describe(),
            ttft=Distribution.of([r.ttft_s for r in done if r.ttft_s is not None], MS),
            tpot=Distribution.of(tpot, MS),
            itl=Distribution.of([gap for r in done for gap in r.itl_s], MS),
            e2e=Distribution.of([r.e2e_s for r in done if r.e2e_s is not None], MS),
            tokens_in=Distribution.of([r.tokens_in for r in done if r.tokens_in is not None]),
            tokens_out=Distribution.of([r.tokens_out for r in done]),
            output_tokens_per_s_per_user=Distribution.of([1.0 / t for t in tpot if t > 0]),
            late_sends=late_sends,
            arrival_lag=Distribution.of([r.sent_s - r.arrival_s for r in records if r.arrival_s is not None], MS),
        )

    def as_dict(self) -> dict:
        return asdict(self)
