"""A short soak (the full one is `make soak`): steady sub-capacity load with good and
bad requests, every request answered as expected, memory and latency recorded."""

from __future__ import annotations

import json

import pytest

from tools.soak import run_soak, write_report

pytestmark = pytest.mark.integration


def test_a_short_soak_answers_every_request_as_expected(triton_for_soak, tmp_path) -> None:
    report = run_soak(triton_for_soak, rate=15, duration_s=25, window_s=5)
    assert report.sent == report.answered > 300
    assert not report.unexpected, report.unexpected_examples
    assert {"good", "bad_utf8", "bad_token", "bad_shape"} <= set(report.outcomes)
    assert set(report.memory_start_mb) >= {"tritonserver", "stub:tokenizer", "stub:encoder"}
    growth = report.memory_end_mb["tritonserver"] - report.memory_start_mb["tritonserver"]
    assert growth < 200, f"tritonserver grew by {growth:.0f} MB in 25 s"
    assert report.server["embed"]["success"] == report.outcomes["good"]["ok"] + report.outcomes["repeat"]["ok"]
    document = json.loads(write_report(report, tmp_path).read_text())
    assert document["passed"] and "soak 25 s" in document["summary"]
