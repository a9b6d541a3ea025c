"""What loadgen reports of a generative model's load levels: a table, a JSON document with
every record, and a CSV in GenAI-Perf's metric names.

The CSV has one row per level. Where GenAI-Perf defines a metric the same way, its name is
used (`profile_export_genai_perf.json`'s keys) with `_avg`, `_min`, `_max`, `_p50`, `_p90`,
`_p99` columns: time_to_first_token, inter_token_latency (per request, the mean gap after the
first token: what vLLM calls TPOT), request_latency, output_token_throughput_per_user,
output_sequence_length, input_sequence_length (the server's count), then
output_token_throughput, request_throughput and request_goodput (per second). One column set
has no GenAI-Perf name: token_gap, every gap between successive tokens (what vLLM calls ITL).
Latencies are in ms; a metric without samples has empty cells.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tools.load.llm.figures import Distribution, LoadFigures
from tools.load.llm.records import StreamRecord
from tools.load.results import format_ms

STATS = ("avg", "min", "max", "p50", "p90", "p99")
DISTRIBUTIONS = (  # CSV name, LoadFigures field
    ("time_to_first_token", "ttft"),
    ("inter_token_latency", "tpot"),
    ("token_gap", "itl"),
    ("request_latency", "e2e"),
    ("output_token_throughput_per_user", "output_tokens_per_s_per_user"),
    ("output_sequence_length", "tokens_out"),
    ("input_sequence_length", "tokens_in"),
)
RATES = (("output_token_throughput", "output_tokens_per_s"), ("request_throughput", "requests_per_s"), ("request_goodput", "goodput_rps"))


@dataclass
class LlmLevelResult:
    label: str
    figures: LoadFigures
    records: list[StreamRecord]

    def to_dict(self) -> dict:
        return {"label": self.label, "figures": self.figures.as_dict(), "records": [r.to_dict() for r in self.records]}

    def table(self) -> str:
        f = self.figures
        outcomes = ", ".join(f"{count} {outcome}" for outcome, count in sorted(f.outcomes.items()))
        lines = [f"{self.label}: {f.requests} requests ({outcomes or 'none'}) in {f.duration_s:.1f} s"]
        lines.append(f"  {'':<18}{'avg':>9}{'p50':>9}{'p90':>9}{'p99':>9}")
        for name, d in (("TTFT ms", f.ttft), ("TPOT ms", f.tpot), ("ITL ms", f.itl), ("E2E ms", f.e2e)):
            lines.append(f"  {name:<18}" + "".join(f"{format_ms(getattr(d, stat)):>9}" for stat in ("avg", "p50", "p90", "p99")))
        lines.append(f"  tokens in/out       {format_ms(f.tokens_in.avg)} / {format_ms(f.tokens_out.avg)} per completed request")
        share = "-" if f.good_share is None else f"{f.good_share:.0%}"
        lines.append(
            f"  output {f.output_tokens_per_s:.1f} tok/s, {f.requests_per_s:.2f} req/s, "
            f"goodput {f.goodput_rps:.2f} req/s ({share} of requests met {f.slo})"
        )
        if f.late_sends:
            lines.append(f"  {f.late_sends} sends were more than 10 ms late (the client could not keep up: the load was lower than asked)")
        return "\n".join(lines)


def csv_columns() -> list[str]:
    return [
        "level",
        "request_count",
        "completed",
        *(f"{name}_{stat}" for name, _ in DISTRIBUTIONS for stat in STATS),
        *(n for n, _ in RATES),
    ]


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}" if abs(value) < 1e4 else f"{value:.1f}"


def csv_row(result: LlmLevelResult) -> dict[str, str | int]:
    f = result.figures
    row: dict[str, str | int] = {"level": result.label, "request_count": f.requests, "completed": f.completed}
    for name, field in DISTRIBUTIONS:
        d: Distribution = getattr(f, field)
        row.update({f"{name}_{stat}": _cell(getattr(d, stat)) for stat in STATS})
    row.update({name: _cell(getattr(f, field)) for name, field in RATES})
    return row


def write_llm_csv(results: Sequence[LlmLevelResult], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=csv_columns())
        writer.writeheader()
        writer.writerows(csv_row(result) for result in results)
    return path
