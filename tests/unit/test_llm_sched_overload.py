"""Overload in the serving layer: `queue_timeout_ms` is parsed, an expired request becomes one
UNAVAILABLE-style reply, and the prefix-cache counters reach vLLM-named metrics."""

from __future__ import annotations

import json

import pytest

from llm.contract import RequestOutput
from llm.serving.request import RequestError, parse_sampling_parameters
from llm.serving.responses import ResponsePlan
from tests.unit.test_llm_metrics import families, metrics, only, stats  # noqa: F401 (families is a fixture)
from tests.unit.test_llm_serving_responses import plan


def test_queue_timeout_ms_is_read_from_sampling_parameters() -> None:
    assert parse_sampling_parameters(json.dumps({"queue_timeout_ms": 250}), 100).queue_timeout_ms == 250.0
    assert parse_sampling_parameters("{}", 100).queue_timeout_ms is None


@pytest.mark.parametrize("value", [0, -5, "soon", True])
def test_a_queue_timeout_that_is_not_a_positive_number_is_refused(value: object) -> None:
    with pytest.raises(RequestError, match="queue_timeout_ms"):
        parse_sampling_parameters(json.dumps({"queue_timeout_ms": value}), 100)


def test_an_expired_request_ends_with_one_final_overloaded_error() -> None:
    replies: ResponsePlan = plan(stream=True)
    expired = RequestOutput("r", "", (), True, "timeout", error="queue timeout: not scheduled within queue_timeout_ms=20")
    (reply,) = replies.replies(expired)
    assert reply.final and reply.overloaded and not reply.cancelled
    assert reply.error.startswith("server busy") and "queue_timeout_ms=20" in reply.error


def test_the_prefix_cache_counters_add_up_the_steps_lookups(families) -> None:  # noqa: F811
    observer = metrics()
    observer.on_step(stats(prefix_cache_queries=530, prefix_cache_hits=496))
    observer.on_step(stats(prefix_cache_queries=0, prefix_cache_hits=0))
    observer.on_step(stats(prefix_cache_queries=20, prefix_cache_hits=0))
    assert only(families, "vllm:prefix_cache_queries_total").value() == 550
    assert only(families, "vllm:prefix_cache_hits_total").value() == 496
