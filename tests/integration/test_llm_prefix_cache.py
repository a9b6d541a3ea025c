"""Prefix caching on the real Triton (on by default): a second request with the same long
system prompt finds its full blocks cached, as the vLLM-named counters show."""

from __future__ import annotations

import time

from tests.integration.llm_streams import generate
from tools.triton_client import fetch_metrics, metric_total

SYSTEM = "You are a careful assistant for a bicycle shop. Answer briefly and name the part. " * 12


def counters(server) -> tuple[float, float]:
    samples = fetch_metrics(server.options.metrics_url)
    return metric_total(samples, "vllm:prefix_cache_queries"), metric_total(samples, "vllm:prefix_cache_hits")


def test_a_repeated_system_prompt_is_served_from_the_prefix_cache(llm_triton) -> None:
    url = llm_triton.options.http_url
    sampling = '{"max_tokens": 2, "temperature": 0}'
    status, _ = generate(url, {"text_input": SYSTEM + "Question: a chain?", "sampling_parameters": sampling})
    assert status == 200
    queries, hits = counters(llm_triton)
    status, (answer,) = generate(url, {"text_input": SYSTEM + "Question: a saddle?", "sampling_parameters": sampling})
    assert status == 200, answer
    deadline = time.monotonic() + 60
    while counters(llm_triton)[1] == hits and time.monotonic() < deadline:
        time.sleep(0.1)
    new_queries, new_hits = counters(llm_triton)
    assert new_queries > queries
    assert new_hits - hits >= 160, "the shared system prompt (about 200 tokens: 12 full blocks of 16) was not reused"
    assert new_hits - hits < new_queries - queries, "the differing question and the last token are always computed"
