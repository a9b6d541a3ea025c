"""perf_analyzer's CSV (`perf_analyzer -f FILE`), written from our results and read from theirs.

So `tools.loadgen --csv` results sit beside perf_analyzer's and Model Analyzer's in the
tools users know. The columns are perf_analyzer's (2.40, read from a file it wrote),
times in microseconds. What we measure differently:
- `Inferences/Second` is rows (texts or sequences) per second, as in perf_analyzer;
- the server columns come from Triton's statistics over the measured window, summed over
  the models measured (an ensemble's steps), all compute in `Server Compute Infer`
  (we read compute as one figure);
- `Client Send` and `Client Recv` are not measured apart: 0, and everything between
  client latency and server time is `Network+Server Send/Recv`.
A level without successful requests has empty latency cells, and one where the server
executed nothing empty server cells: no samples, no value.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from tools.loadgen.report import LoadResult

COLUMNS = (
    "Concurrency",
    "Inferences/Second",
    "Client Send",
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
    "Client Recv",
    "p50 latency",
    "p90 latency",
    "p95 latency",
    "p99 latency",
)
RATE_COLUMN = "Request Rate"  # perf_analyzer's first column in --request-rate-range mode


def _level(traffic: str) -> tuple[str, str]:
    """('Concurrency', '16') from 'concurrency 16'; ('Request Rate', '40') from 'poisson 40 req/s'."""
    words = traffic.split()
    if words and words[0] == "concurrency":
        return COLUMNS[0], words[1]
    numbers = [word for word in words if word.replace(".", "", 1).isdigit()]
    return RATE_COLUMN, numbers[0] if numbers else traffic


def _server_us(result: LoadResult, field: str) -> float | None:
    """Summed over the models measured; None when no model reported it (it executed nothing)."""
    values = [getattr(window, field) for window in result.server.values()]
    known = [value for value in values if value is not None]
    return sum(known) * 1000 if known else None


def perf_row(result: LoadResult) -> dict[str, str]:
    column, level = _level(result.traffic)
    row = {column: level, "Inferences/Second": f"{result.rows_per_s:.4f}", "Client Send": "0", "Client Recv": "0"}
    queue_us = _server_us(result, "average_queue_ms")
    compute_us = _server_us(result, "average_compute_ms")
    if queue_us is not None and compute_us is not None:
        row.update({"Server Queue": f"{queue_us:.0f}", "Server Compute Input": "0", "Server Compute Infer": f"{compute_us:.0f}"})
        row["Server Compute Output"] = "0"
    if result.latency.count:
        server_us = (queue_us or 0.0) + (compute_us or 0.0)
        row["Network+Server Send/Recv"] = f"{max(0.0, result.latency.mean_ms * 1000 - server_us):.0f}"
        for name, value in (
            ("p50", result.latency.p50_ms),
            ("p90", result.latency.p90_ms),
            ("p95", result.latency.p95_ms),
            ("p99", result.latency.p99_ms),
        ):
            row[f"{name} latency"] = f"{value * 1000:.0f}"
    return row


def write_perf_csv(results: Sequence[LoadResult], path: Path) -> Path:
    """One row per load level; closed-loop and open-loop levels go in one file only if they
    share perf_analyzer's first column, as they would from one perf_analyzer run."""
    rows = [perf_row(result) for result in results]
    first = {next(iter(row)) for row in rows}
    if len(first) > 1:
        raise ValueError("perf_analyzer's CSV holds either concurrency or request-rate levels, not both")
    header = [first.pop() if rows else COLUMNS[0], *COLUMNS[1:]]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header, restval="")
        writer.writeheader()
        writer.writerows(rows)
    return path


def read_perf_csv(path: Path) -> list[dict]:
    """Rows of a perf_analyzer CSV (theirs or ours): level, rows/s, p50/p99 in ms (None when empty)."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    parsed = []
    for row in rows:
        level_column = COLUMNS[0] if COLUMNS[0] in row else RATE_COLUMN

        def ms(column: str, row: dict = row) -> float | None:
            return float(row[column]) / 1000 if row.get(column) else None

        parsed.append(
            {
                "level": float(row[level_column]),
                "throughput_rps": float(row["Inferences/Second"]),
                "p50_ms": ms("p50 latency"),
                "p99_ms": ms("p99 latency"),
            }
        )
    return parsed
