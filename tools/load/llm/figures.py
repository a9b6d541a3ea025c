"""The figures of one load level: throughput, TTFT, TPOT, ITL and goodput under an SLO.

Goodput follows DistServe (OSDI 2024) and `vllm bench serve --goodput`: a request counts
when it completed and met every objective (its own TTFT and its own TPOT), and goodput is
those requests per second of the level. Output tokens/s counts every token received,
including those of requests cut at the end. Both divide by the level's whole duration,
from its start to its last answer (or the drain limit), as `vllm bench serve` does.
Percentiles come from tools.load.results.percentile (None without samples).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from tools.load.llm.records import StreamRecord
from tools.load.results import percentile


@dataclass(frozen=True)
class Slo:
    ttft_s: float = 1.0
    tpot_s: float = 0.100

    def met_by(self, record: StreamRecord) -> bool:
        ttft, tpot = record.ttft_s, record.tpot_s
        return record.completed and ttft is not None and ttft <= self.ttft_s and (tpot is None or tpot <= self.tpot_s)

    def describe(self) -> str:
        return f"TTFT <= {self.ttft_s * 1000:g} ms and TPOT <= {self.tpot_s * 1000:g} ms, per request"

    @classmethod
    def parse(cls, text: str) -> Slo:
        """'ttft=1,tpot=0.1' (seconds)."""
        values = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            if not sep or key not in ("ttft", "tpot"):
                raise ValueError(f"an SLO is ttft=SECONDS,tpot=SECONDS, got {text!r}")
            values[f"{key}_s"] = float(value)
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
