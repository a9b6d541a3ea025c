"""The LLM user's reading of a generate_stream body and what it reports to locust (no server)."""

from __future__ import annotations

import itertools

from loadtest.llm.stream import locust_requests, token_times
from loadtest.verdict import ClassSLO, RowResult, judge


def clock_from(*values: float):
    return iter(values).__next__


def test_only_events_that_carry_text_are_tokens_timed_on_arrival() -> None:
    lines = [
        b'data: {"model_name":"llm","text_output":"In"}\n',
        b"\n",
        b'data: {"model_name":"llm","text_output":""}\n',
        b'data: {"model_name":"llm","text_output":" a"}\n',
    ]
    times, error = token_times(lines, clock=clock_from(1.0, 2.0, 3.0))
    assert times == [1.0, 3.0] and error is None


def test_an_error_event_ends_the_stream_with_the_servers_message() -> None:
    lines = [
        b'data: {"text_output":"In"}\n',
        b'data: {"error":"max_waiting: 4 requests are already waiting"}\n',
        b'data: {"text_output":"x"}\n',
    ]
    times, error = token_times(lines, clock=itertools.count(1.0).__next__)
    assert times == [1.0] and error == "max_waiting: 4 requests are already waiting"


def fired_by(start: float, times: list[float], end: float, error: str | None) -> list[dict]:
    return locust_requests("llm", start, times, end, error)


def test_a_stream_reports_its_first_token_each_gap_and_the_whole_request() -> None:
    fired = fired_by(10.0, [10.5, 10.6, 10.8], 11.0, None)
    assert [(event["name"], round(event["response_time"])) for event in fired] == [
        ("llm/ttft", 500),
        ("llm/itl", 100),
        ("llm/itl", 200),
        ("llm/e2e", 1000),
    ]
    assert fired[-1]["exception"] is None and fired[-1]["response_length"] == 3


def test_a_failed_stream_fails_only_its_e2e_request() -> None:
    fired = fired_by(10.0, [], 10.2, "HTTP 400: bad sampling_parameters")
    (event,) = fired
    assert event["name"] == "llm/e2e" and str(event["exception"]) == "HTTP 400: bad sampling_parameters"


def test_the_ttft_row_is_judged_against_its_own_slo() -> None:
    row = RowResult("http-stream", "llm/ttft", "ttft", requests=10, failures=0, p95_ms=900.0, p99_ms=1500.0)
    judge(row, ClassSLO(p99_ms=1000.0, max_failure_ratio=0.0))
    assert row.problems == ["p99 1500 ms > 1000 ms"]
