"""A short soak (the full one is `make soak`): steady sub-capacity load with good and
bad requests, every request answered as expected, memory and latency recorded.

"Sub-capacity" is measured, not assumed: the rate is at most half the closed-loop
capacity measured on the same server first, so a slower machine soaks at a lower rate."""

from __future__ import annotations

import json

import pytest

from tools.loadgen import embed_target
from tools.loadgen.measure import measure_capacity
from tools.reliability.soak import run_soak, write_report

pytestmark = pytest.mark.integration

RATE, SECONDS = 15.0, 25.0  # the rate on a machine fast enough for it


def test_a_short_soak_answers_every_request_as_expected(triton_for_soak, tmp_path) -> None:
    options = triton_for_soak.options
    capacity = measure_capacity(embed_target(), options.grpc_url, "grpc", options.http_url)
    rate = min(RATE, round(capacity / 2, 1))
    report = run_soak(triton_for_soak, rate=rate, duration_s=SECONDS, window_s=5)
    assert abs(report.sent - rate * SECONDS) <= 1, "one request per scheduled slot"
    assert report.answered == report.sent
    assert not report.unexpected, report.unexpected_examples
    assert {"good", "bad_utf8", "bad_token", "bad_shape"} <= set(report.outcomes)
    assert set(report.memory_start_mb) >= {"tritonserver", "stub:tokenizer", "stub:encoder"}
    growth = report.memory_end_mb["tritonserver"] - report.memory_start_mb["tritonserver"]
    assert growth < 200, f"tritonserver grew by {growth:.0f} MB in {SECONDS:g} s"
    assert report.server["embed"]["success"] == report.outcomes["good"]["ok"] + report.outcomes["repeat"]["ok"]
    measured = [w for w in report.windows[1:] if w.completed]
    assert measured and all(w.good_p50_ms is not None and w.good_p50_ms <= w.good_p99_ms for w in measured)
    document = json.loads(write_report(report, tmp_path).read_text())
    assert document["passed"] and document["summary"].startswith(f"soak {SECONDS:.0f} s at {rate:g} req/s")
