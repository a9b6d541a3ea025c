"""Windows for the LLM controller, from stream records and from cumulative histograms."""

from __future__ import annotations

from tools.adapt.llm.windows import histogram_p99, window_from_records
from tools.load.llm.records import StreamRecord


def record(sent: float, times: list[float]) -> StreamRecord:
    r = StreamRecord(0, sent)
    for t in times:
        r.add_tokens(t, 1)
    return r


def test_a_window_counts_first_tokens_inside_it_and_tpot_over_the_tokens_inside_it():
    records = [
        record(0.0, [1.0, 1.5, 2.0]),  # TTFT 1.0 in [0, 10); TPOT 0.5
        record(5.0, [8.0, 9.0, 11.0]),  # TTFT 3.0; inside [0, 10): 8, 9 -> TPOT 1.0
        record(9.0, [12.0, 12.2]),  # first token after the window: neither
    ]
    window = window_from_records(records, 0.0, 10.0, waiting=2.5)
    assert window.samples == 2 and window.ttft_p99_s == 3.0 and window.tpot_p99_s == 1.0 and window.waiting == 2.5


def test_a_window_without_first_tokens_has_no_ttft():
    window = window_from_records([record(0.0, [1.0, 1.5])], 5.0, 10.0, waiting=0.0)
    assert window.samples == 0 and window.ttft_p99_s is None and window.tpot_p99_s is None


def test_histogram_p99_is_the_bound_of_the_bucket_holding_it():
    before = {0.1: 10.0, 0.5: 10.0, 1.0: 10.0, float("inf"): 10.0}
    after = {0.1: 60.0, 0.5: 109.0, 1.0: 110.0, float("inf"): 110.0}  # 100 new: 50 <= 0.1, 49 <= 0.5, 1 <= 1.0
    assert histogram_p99(before, after) == (0.5, 100)


def test_histogram_p99_without_new_observations_is_none():
    counts = {0.1: 3.0, float("inf"): 3.0}
    assert histogram_p99(counts, counts) == (None, 0)
