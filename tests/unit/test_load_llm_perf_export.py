"""perf_analyzer's profile export read as records: the figures come out as computed by hand."""

from __future__ import annotations

import json

import pytest

from tools.load.llm.figures import LoadFigures, Slo
from tools.load.llm.perf_export import records_from_profile_export

MS = 1_000_000  # ns


def test_a_profile_export_becomes_one_record_per_request_with_one_token_per_response(tmp_path) -> None:
    base = 1_796_334_625_000_000_000
    export = {
        "version": "2.40.0",
        "experiments": [
            {
                "experiment": {"mode": "concurrency", "value": 1},
                "requests": [
                    {"timestamp": base + 1000 * MS, "response_timestamps": [base + 1300 * MS, base + 1350 * MS]},
                    {"timestamp": base, "response_timestamps": [base + 200 * MS, base + 300 * MS, base + 500 * MS]},
                ],
                "window_boundaries": [],
            }
        ],
    }
    path = tmp_path / "profile_export.json"
    path.write_text(json.dumps(export))
    records, span = records_from_profile_export(path)
    assert [r.sent_s for r in records] == pytest.approx([0.0, 1.0])  # ordered by send, from the earliest
    assert span == pytest.approx(1.35)
    figures = LoadFigures.of(records, span, Slo(ttft_s=1.0, tpot_s=0.1))
    assert figures.ttft.avg == pytest.approx((200 + 300) / 2)
    assert figures.tpot.p50 == pytest.approx((150 + 50) / 2)  # (500-200)/2 and (1350-1300)/1
    assert figures.e2e.max == pytest.approx(500.0) and figures.tokens_out.avg == pytest.approx(2.5)
    assert figures.goodput_rps == pytest.approx(1 / 1.35)  # the first request's TPOT of 150 ms misses


def test_a_file_that_is_not_a_profile_export_is_refused(tmp_path) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"data": []}))
    with pytest.raises(ValueError, match="not a perf_analyzer profile export"):
        records_from_profile_export(path)
