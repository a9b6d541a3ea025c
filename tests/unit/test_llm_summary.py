"""`make metrics` summarises the LLM's Prometheus metrics (tools/observe/llm/summary.py)."""

from __future__ import annotations

import pytest

from tools.observe.llm.summary import llm_rows, quantile
from tools.triton_client import parse_metrics

L = 'model="llm",version="1"'


def page(ttft_counts: tuple[int, int, int], generated: float, aborted: int = 0) -> str:
    small, mid, total = ttft_counts
    return f"""# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{{L},le="0.1"}} {small}
vllm:time_to_first_token_seconds_bucket{{{L},le="0.5"}} {mid}
vllm:time_to_first_token_seconds_bucket{{{L},le="+Inf"}} {total}
vllm:time_to_first_token_seconds_count{{{L}}} {total}
vllm:time_to_first_token_seconds_sum{{{L}}} 1.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{{L}}} {generated}
# TYPE vllm:request_success_total counter
vllm:request_success_total{{{L},finished_reason="length"}} {total}
vllm:request_success_total{{{L},finished_reason="abort"}} {aborted}
# TYPE llm:step_prefill_tokens histogram
llm:step_prefill_tokens_bucket{{{L},le="+Inf"}} 4
llm:step_prefill_tokens_count{{{L}}} 4
llm:step_prefill_tokens_sum{{{L}}} 100
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{{L}}} 3
"""


def test_percentiles_interpolate_within_the_bucket_like_prometheus() -> None:
    (row,) = llm_rows(parse_metrics(page((5, 10, 10), 40)))
    assert row["TTFT p50 ms"] == pytest.approx(100.0)
    assert row["TTFT p99 ms"] == pytest.approx(100 + 400 * (9.9 - 5) / 5)


def test_a_histogram_without_samples_has_no_percentile() -> None:
    (row,) = llm_rows(parse_metrics(page((0, 0, 0), 0)))
    assert row["TTFT p50 ms"] is None and row["ITL p50 ms"] is None


def test_a_window_subtracts_counters_but_reads_gauges_now() -> None:
    earlier, later = parse_metrics(page((1, 1, 1), 10)), parse_metrics(page((2, 3, 3), 50, aborted=1))
    (row,) = llm_rows(later, earlier, seconds=4.0)
    assert row["out tok/s"] == 10.0
    assert row["requests"] == 3 and row["finished (reason x n)"] == "abortx1 lengthx2"
    assert row["running"] == 3 and row["prefill tok/step"] is None, "no step in the window"


def test_servers_without_the_llm_give_no_rows() -> None:
    assert llm_rows(parse_metrics('# TYPE nv_inference_count counter\nnv_inference_count{model="embed",version="1"} 3\n')) == []


def test_quantile_of_nothing_is_none() -> None:
    assert quantile({}, "vllm:e2e_request_latency_seconds", 0.5) is None
