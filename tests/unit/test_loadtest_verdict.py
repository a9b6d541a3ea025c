"""The SLO verdict on small hand-written locust CSV reports (no server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.latency import SuccessLatency
from loadtest.verdict import ClassSLO, classify_failure, evaluate, format_verdict, run

STATS_HEADER = "Type,Name,Request Count,Failure Count,Median Response Time,95%,99%"


def write_reports(tmp_path: Path, stats: list[str], failures: list[str] = (), success: list[str] | None = None) -> Path:
    prefix = tmp_path / "locust"
    Path(f"{prefix}_stats.csv").write_text("\n".join([STATS_HEADER, *stats, ",Aggregated,999,9,1,1,1"]) + "\n")
    Path(f"{prefix}_failures.csv").write_text("\n".join(["Method,Name,Error,Occurrences", *failures]) + "\n")
    if success is not None:
        Path(f"{prefix}_success_latency.csv").write_text("\n".join(["Type,Name,Count,p50_ms,p95_ms,p99_ms,Max_ms", *success]) + "\n")
    return prefix


SLOS = {"interactive": ClassSLO(p95_ms=100, p99_ms=200, max_failure_ratio=0.01), "bulk": ClassSLO(p95_ms=1000, p99_ms=2000)}


def test_passes_when_every_class_is_inside_its_slo(tmp_path: Path) -> None:
    prefix = write_reports(tmp_path, ["grpc,embed/interactive,100,0,20,90,150", "http,embed/bulk,10,0,300,900,1500"])
    verdict = evaluate(prefix, SLOS)
    assert verdict.passed
    assert [row.traffic for row in verdict.rows] == ["interactive", "bulk"]


def test_fails_on_a_latency_percentile_over_target(tmp_path: Path) -> None:
    prefix = write_reports(tmp_path, ["grpc,embed/interactive,100,0,20,90,250"])
    verdict = evaluate(prefix, SLOS)
    assert not verdict.passed
    assert verdict.rows[0].problems == ["p99 250 ms > 200 ms"]


def test_fails_on_failure_ratio_and_counts_rejections_per_class(tmp_path: Path) -> None:
    prefix = write_reports(
        tmp_path,
        ["grpc,embed/interactive,100,5,20,50,60", "http,embed/bulk,50,20,300,900,1500"],
        failures=[
            "grpc,embed/interactive,[StatusCode.UNAVAILABLE] Exceeds maximum queue size,3",
            "grpc,embed/interactive,Deadline Exceeded,2",
            "http,embed/bulk,Exceeds maximum queue size,20",
        ],
    )
    verdict = evaluate(prefix, SLOS)
    assert not verdict.passed
    assert verdict.rejections_by_class() == {"interactive": 3, "bulk": 20}
    assert verdict.rows[0].failure_kinds == {"queue full": 3, "client timeout": 2}
    assert any("failure ratio" in p for p in verdict.rows[1].problems)


def test_prefers_latency_of_successful_requests_when_recorded(tmp_path: Path) -> None:
    # Locust's percentiles (fast rejections mixed in) pass; the successful requests' do not.
    prefix = write_reports(tmp_path, ["grpc,embed/interactive,100,0,5,10,20"], success=["grpc,embed/interactive,100,40,150,400,500"])
    verdict = evaluate(prefix, SLOS)
    assert verdict.latency_source == "successful requests"
    assert verdict.rows[0].p95_ms == 150
    assert not verdict.passed


def test_no_requests_is_a_failure(tmp_path: Path) -> None:
    assert not evaluate(write_reports(tmp_path, []), SLOS).passed


def test_cli_exit_status_follows_the_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = write_reports(tmp_path, ["grpc,embed/interactive,100,0,20,90,150"])
    assert run([str(prefix)]) == 0
    assert run([str(prefix), "--slo-interactive-p95-ms", "1"]) == 1
    assert "VERDICT: FAIL" in capsys.readouterr().out
    assert run([str(tmp_path / "missing")]) == 2


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("[StatusCode.UNAVAILABLE] Exceeds maximum queue size", "queue full"),
        ("Request timeout expired", "queue timeout"),
        ("[StatusCode.DEADLINE_EXCEEDED] Deadline Exceeded", "client timeout"),
        ("ConnectionRefusedError: [Errno 111]", "other"),
    ],
)
def test_classifies_triton_failure_messages(message: str, kind: str) -> None:
    assert classify_failure(message) == kind


def test_a_class_without_successful_requests_has_no_latency_and_fails_its_slo(tmp_path: Path) -> None:
    prefix = write_reports(
        tmp_path,
        ["grpc,embed/interactive,40,40,3,5,6", "grpc,embed/bulk,10,0,300,900,1500"],
        failures=["grpc,embed/interactive,Exceeds maximum queue size,40"],
        success=["grpc,embed/bulk,10,300,900,1500,1600"],
    )
    verdict = evaluate(prefix, SLOS)
    interactive = verdict.rows[0]
    assert (interactive.p95_ms, interactive.p99_ms) == (None, None), "no samples: no value, never 0.0"
    assert "p95: no successful requests" in interactive.problems
    line = next(line for line in format_verdict(verdict, SLOS).splitlines() if "embed/interactive" in line)
    assert line.split()[5:7] == ["-", "-"]


def test_a_row_without_requests_has_no_failure_ratio(tmp_path: Path) -> None:
    verdict = evaluate(write_reports(tmp_path, ["grpc,embed/interactive,0,0,0,0,0", "grpc,embed/bulk,10,0,300,900,1500"]), SLOS)
    empty = verdict.rows[0]
    assert empty.failure_ratio is None and empty.problems == ["no requests"]
    assert not verdict.passed
    line = next(line for line in format_verdict(verdict, SLOS).splitlines() if "embed/interactive" in line)
    assert line.split()[3] == "-"


def test_worker_reports_merged_on_the_master_equal_one_process_recording() -> None:
    samples = [("grpc", "embed/interactive", float(ms)) for ms in range(1, 41)] + [("http", "embed/bulk", 500.0 + ms) for ms in range(9)]
    alone, master = SuccessLatency(), SuccessLatency()
    workers = [SuccessLatency(), SuccessLatency()]
    for index, (request_type, name, ms) in enumerate(samples):
        alone.record(request_type, name, ms)
        workers[index % 2].record(request_type, name, ms)
        if index % 7 == 0:  # periodic reports, as locust sends them every few seconds
            master.merge_report(workers[index % 2].take_report())
    workers[1].record("grpc", "embed/interactive", 99.0, exception=RuntimeError("rejected"))  # failures stay out
    for worker in workers:  # the final report of each worker
        master.merge_report(worker.take_report())
    assert master.rows() == alone.rows()
    assert all(not worker.samples for worker in workers)
