"""The SLO verdict on a finished locust run, read from locust's CSV reports.

`python -m loadtest.verdict <csv prefix> [SLO options]` judges any run written with
`locust --csv <prefix>`; `python -m loadtest.run` calls the same code after its run.
Latency percentiles come from the successful requests (`<prefix>_success_latency.csv`,
written by our locustfile, also when locust runs distributed); without that file,
locust's own percentiles are used. A row without successful requests has no latency
(None, shown as "-"), and one without requests no failure ratio: an SLO on them fails.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass, field
from pathlib import Path

from loadtest.latency import SUCCESS_SUFFIX
from tools.load.outcomes import CLIENT_TIMEOUT, REJECTED, TIMEOUT, classify

TRAFFIC_CLASSES = ("interactive", "bulk")
# The LLM users' request kinds (loadtest/llm/users.py), judged like traffic classes.
LLM_CLASSES = ("ttft", "itl", "e2e")
# The LLM's SLO: the LLM benchmark's default objective (tools/bench/llm: TTFT 1 s, 100 ms per
# token) and the one the Prometheus alerts compare with (monitoring/prometheus/rules); a test
# keeps the three equal.
LLM_TTFT_SLO_MS = 1000.0
LLM_ITL_SLO_MS = 100.0
# The shared outcome classification (tools/load/outcomes.py) under the names this report shows.
FAILURE_KINDS = {REJECTED: "queue full", TIMEOUT: "queue timeout", CLIENT_TIMEOUT: "client timeout"}


@dataclass(frozen=True)
class ClassSLO:
    """Targets for one traffic class; None means not checked."""

    p95_ms: float | None = None
    p99_ms: float | None = None
    max_failure_ratio: float = 0.01

    @classmethod
    def per_class_from_cli_args(cls, args: argparse.Namespace) -> dict[str, ClassSLO]:
        """Each traffic class's targets from the options add_slo_arguments declares; a ttft or
        itl row never fails (a failed stream counts in e2e), so only e2e has a failure ratio."""
        return {
            traffic: cls(
                p95_ms=getattr(args, f"slo_{traffic}_p95_ms"),
                p99_ms=getattr(args, f"slo_{traffic}_p99_ms"),
                max_failure_ratio=getattr(args, f"slo_{traffic}_failure_ratio", 0.0),
            )
            for traffic in (*TRAFFIC_CLASSES, *LLM_CLASSES)
        }


@dataclass
class RowResult:
    """One locust stats row (protocol x model/traffic) judged against its class's SLO."""

    request_type: str
    name: str
    traffic: str
    requests: int
    failures: int
    p95_ms: float | None
    p99_ms: float | None
    failure_kinds: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def failure_ratio(self) -> float | None:
        """None for a row without requests: no samples, no value (never 0.0)."""
        return self.failures / self.requests if self.requests else None

    @property
    def rejections(self) -> int:
        """Refused by Triton's queue policy (queue full or queue timeout)."""
        return self.failure_kinds.get("queue full", 0) + self.failure_kinds.get("queue timeout", 0)


@dataclass
class Verdict:
    rows: list[RowResult]
    latency_source: str

    @property
    def passed(self) -> bool:
        return bool(self.rows) and sum(r.requests for r in self.rows) > 0 and not any(r.problems for r in self.rows)

    def rejections_by_class(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for row in self.rows:
            totals[row.traffic] = totals.get(row.traffic, 0) + row.rejections
        return totals


def traffic_of(name: str) -> str:
    """Our users name requests `<model>/<traffic>`."""
    return name.rsplit("/", 1)[-1]


def classify_failure(error: str) -> str:
    """A locust failure's kind, as the load driver classifies the same message."""
    return FAILURE_KINDS.get(classify(error), "other")


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _number(value: str | None) -> float | None:
    if value in (None, "", "N/A"):
        return None
    return float(value)


def evaluate(csv_prefix: str | Path, slos: dict[str, ClassSLO]) -> Verdict:
    """Judge `<prefix>_stats.csv` (+ `_failures.csv`, `_success_latency.csv`)."""
    prefix = str(csv_prefix)
    stats_path = Path(f"{prefix}_stats.csv")
    if not stats_path.is_file():
        raise FileNotFoundError(f"{stats_path} not found: did locust run with --csv {prefix}?")
    success_path = Path(f"{prefix}{SUCCESS_SUFFIX}")
    success = {(r["Type"], r["Name"]): r for r in _read(success_path)} if success_path.is_file() else None
    failures_path = Path(f"{prefix}_failures.csv")
    failures = _read(failures_path) if failures_path.is_file() else []

    rows = []
    for record in _read(stats_path):
        if record["Name"] == "Aggregated" or not record["Type"]:
            continue
        key = (record["Type"], record["Name"])
        if success is not None:
            latency = success.get(key, {})
            p95, p99 = _number(latency.get("p95_ms")), _number(latency.get("p99_ms"))
        else:
            p95, p99 = _number(record.get("95%")), _number(record.get("99%"))
        row = RowResult(
            request_type=key[0],
            name=key[1],
            traffic=traffic_of(key[1]),
            requests=int(record["Request Count"]),
            failures=int(record["Failure Count"]),
            p95_ms=p95,
            p99_ms=p99,
        )
        for failure in failures:
            if (failure["Method"], failure["Name"]) == key:
                kind = classify_failure(failure["Error"])
                row.failure_kinds[kind] = row.failure_kinds.get(kind, 0) + int(failure["Occurrences"])
        judge(row, slos.get(row.traffic))
        rows.append(row)
    return Verdict(rows, "successful requests" if success is not None else "all requests (locust)")


def judge(row: RowResult, slo: ClassSLO | None) -> None:
    if slo is None:
        return
    if row.failure_ratio is None:
        row.problems.append("no requests")
        return
    if row.failure_ratio > slo.max_failure_ratio:
        row.problems.append(f"failure ratio {row.failure_ratio:.2%} > {slo.max_failure_ratio:.2%}")
    for label, measured, target in (("p95", row.p95_ms, slo.p95_ms), ("p99", row.p99_ms, slo.p99_ms)):
        if target is None:
            continue
        if measured is None:
            row.problems.append(f"{label}: no successful requests")
        elif measured > target:
            row.problems.append(f"{label} {measured:.0f} ms > {target:.0f} ms")


def format_verdict(verdict: Verdict, slos: dict[str, ClassSLO]) -> str:
    lines = [f"SLO verdict (latency over {verdict.latency_source}):"]
    width = max([5, *(len(row.request_type) for row in verdict.rows)])  # "http", "grpc", the LLM's "http-stream"
    header = f"  {'type':{width}} {'name':24} {'requests':>8} {'fail %':>7} {'rejected':>8} {'p95 ms':>8} {'p99 ms':>8}  result"
    lines.append(header)
    for row in verdict.rows:
        slo = slos.get(row.traffic)
        target = "" if slo is None else f" (SLO p95<={slo.p95_ms} p99<={slo.p99_ms} fail<={slo.max_failure_ratio:.1%})"
        result = "no SLO" if slo is None else ("PASS" if not row.problems else "FAIL: " + "; ".join(row.problems))
        p95 = "-" if row.p95_ms is None else f"{row.p95_ms:.0f}"
        p99 = "-" if row.p99_ms is None else f"{row.p99_ms:.0f}"
        ratio = "-" if row.failure_ratio is None else f"{row.failure_ratio:.2%}"
        counts = f"{row.requests:8d} {ratio:>7} {row.rejections:8d}"
        lines.append(f"  {row.request_type:{width}} {row.name:24} {counts} {p95:>8} {p99:>8}  {result}{target}")
        if row.failure_kinds:
            kinds = ", ".join(f"{kind}: {count}" for kind, count in sorted(row.failure_kinds.items()))
            lines.append(f"        failures by kind: {kinds}")
    rejected = ", ".join(f"{traffic}: {count}" for traffic, count in sorted(verdict.rejections_by_class().items()))
    lines.append(f"  rejected by Triton's queue policy, per class: {rejected or 'none'}")
    if not verdict.rows or not any(r.requests for r in verdict.rows):
        lines.append("  no requests were recorded")
    lines.append(f"VERDICT: {'PASS' if verdict.passed else 'FAIL'}")
    return "\n".join(lines)


def add_slo_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("SLO (per traffic class; latency of successful requests)")
    group.add_argument("--slo-interactive-p95-ms", type=float, default=1000.0, help="default: %(default)s")
    group.add_argument("--slo-interactive-p99-ms", type=float, default=2000.0, help="default: %(default)s")
    group.add_argument("--slo-bulk-p95-ms", type=float, default=4000.0, help="default: %(default)s")
    group.add_argument("--slo-bulk-p99-ms", type=float, default=8000.0, help="default: %(default)s")
    group.add_argument("--slo-interactive-failure-ratio", type=float, default=0.01, help="default: %(default)s")
    group.add_argument("--slo-bulk-failure-ratio", type=float, default=0.01, help="default: %(default)s")
    llm = parser.add_argument_group("LLM SLO (the LLM users' time to first token, inter-token gaps and whole requests)")
    llm.add_argument("--slo-ttft-p95-ms", type=float, default=None, help="default: not checked")
    llm.add_argument("--slo-ttft-p99-ms", type=float, default=LLM_TTFT_SLO_MS, help="default: %(default)s")
    llm.add_argument("--slo-itl-p95-ms", type=float, default=None, help="default: not checked")
    llm.add_argument("--slo-itl-p99-ms", type=float, default=LLM_ITL_SLO_MS, help="default: %(default)s")
    llm.add_argument("--slo-e2e-p95-ms", type=float, default=None, help="default: not checked")
    llm.add_argument("--slo-e2e-p99-ms", type=float, default=None, help="default: not checked")
    llm.add_argument("--slo-e2e-failure-ratio", type=float, default=0.01, help="failed streams (default: %(default)s)")


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.verdict", description=__doc__)
    parser.add_argument("csv_prefix", help="the --csv prefix locust wrote, e.g. reports/loadtest/<run>/locust")
    add_slo_arguments(parser)
    args = parser.parse_args(argv)
    slos = ClassSLO.per_class_from_cli_args(args)
    try:
        verdict = evaluate(args.csv_prefix, slos)
    except (FileNotFoundError, KeyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_verdict(verdict, slos))
    return 0 if verdict.passed else 1


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
