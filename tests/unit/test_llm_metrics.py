"""The LLM's Prometheus metrics: vLLM's names, fed from the loop's step and request stats."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from llm.contract import RequestTimings, StepStats
from llm.metrics import FAMILIES, LlmMetrics
from tests.unit import fake_pb_utils

LABELS = {"model": "llm", "version": "1"}


@pytest.fixture
def families():
    """The fake's registry of metric families, reset for each test."""
    fake_pb_utils.module()
    return fake_pb_utils.MetricFamily.families


def metrics(background: bool = False) -> LlmMetrics:
    """The observer on the fake's MetricFamily (all it uses of pb_utils)."""
    return LlmMetrics(SimpleNamespace(MetricFamily=fake_pb_utils.MetricFamily), LABELS, background=background)


def stats(**overrides) -> StepStats:
    values = dict(
        started=0.0,
        duration_s=0.01,
        prefill_tokens=40,
        decode_seqs=3,
        kv_tokens_attended=100,
        running=4,
        waiting=2,
        kv_blocks_used=25,
        kv_blocks_total=100,
        preemptions=1,
    )
    return StepStats(**{**values, **overrides})


def wait_for(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def only(families, name: str):
    (metric,) = families[name].metrics
    return metric


def test_every_family_is_registered_with_its_kind(families) -> None:
    metrics()
    for name, (kind, _, _) in FAMILIES.items():
        assert families[name].kind == getattr(fake_pb_utils.MetricFamily, kind)
    assert "vllm:time_to_first_token_seconds" in families and "vllm:num_requests_running" in families


def test_a_step_records_its_composition_the_load_and_preemptions(families) -> None:
    metrics().on_step(stats())
    assert only(families, "llm:step_prefill_tokens").observed == [40]
    assert only(families, "llm:step_decode_sequences").observed == [3]
    assert only(families, "vllm:iteration_tokens_total").observed == [43]
    assert only(families, "vllm:num_requests_running").value() == 4
    assert only(families, "vllm:num_requests_waiting").value() == 2
    assert only(families, "vllm:kv_cache_usage_perc").value() == 0.25
    assert only(families, "vllm:num_preemptions_total").value() == 1
    assert only(families, "vllm:num_requests_running").labels == LABELS


def test_a_finished_request_records_its_latencies_tokens_and_reason(families) -> None:
    recorder = metrics()
    recorder.on_finished(RequestTimings("r", 0.1, 0.3, 1.0, (0.05, 0.06), prompt_tokens=12, output_tokens=3, finish_reason="length"))
    recorder.on_finished(RequestTimings("s", None, None, 0.2, (), prompt_tokens=5, output_tokens=0, finish_reason="abort"))
    assert only(families, "vllm:request_queue_time_seconds").observed == [0.1], "no sample: nothing observed"
    assert only(families, "vllm:time_to_first_token_seconds").observed == [0.3]
    assert only(families, "vllm:inter_token_latency_seconds").observed == [0.05, 0.06]
    assert only(families, "vllm:e2e_request_latency_seconds").observed == [1.0, 0.2]
    assert only(families, "vllm:prompt_tokens_total").value() == 17
    assert only(families, "vllm:generation_tokens_total").value() == 3
    by_reason = {m.labels["finished_reason"]: m.value() for m in families["vllm:request_success_total"].metrics}
    assert by_reason == {"length": 1, "abort": 1}


def test_lora_adapters_get_vllms_info_gauge_and_their_own_token_counters(families) -> None:
    recorder = metrics()
    recorder.on_step(stats())  # no adapter in use: no series at all
    assert families["vllm:lora_requests_info"].metrics == []
    recorder.on_step(stats(started=5.0, running_adapters=("a", "b"), waiting_adapters=("c",), max_loras=2))
    recorder.on_step(stats(started=6.0, running_adapters=("a", "b"), waiting_adapters=("c",), max_loras=2))  # unchanged: no write
    recorder.on_step(stats(started=7.0, max_loras=2))  # all drained: a series saying so
    info = {
        (m.labels["running_lora_adapters"], m.labels["waiting_lora_adapters"]): m.value()
        for m in families["vllm:lora_requests_info"].metrics
    }
    assert info == {("a,b", "c"): 5.0, ("", ""): 7.0}
    assert all(m.labels["max_lora"] == "2" and m.labels["model"] == "llm" for m in families["vllm:lora_requests_info"].metrics)
    recorder.on_finished(RequestTimings("r", 0.1, 0.3, 1.0, (), prompt_tokens=12, output_tokens=3, finish_reason="length", lora_name="a"))
    recorder.on_finished(RequestTimings("s", 0.1, 0.3, 1.0, (), prompt_tokens=4, output_tokens=2, finish_reason="stop", lora_name="a"))
    recorder.on_finished(RequestTimings("t", 0.1, 0.3, 1.0, (), prompt_tokens=7, output_tokens=1, finish_reason="stop"))
    assert {m.labels["lora_name"]: m.value() for m in families["llm:lora_generation_tokens_total"].metrics} == {"a": 5}
    assert {m.labels["lora_name"]: m.value() for m in families["llm:lora_prompt_tokens_total"].metrics} == {"a": 16}
    assert only(families, "vllm:generation_tokens_total").value() == 6


def test_the_writer_thread_records_everything_queued_before_close(families) -> None:
    recorder = metrics(background=True)
    for _ in range(50):
        recorder.on_step(stats(preemptions=0))
    recorder.close()
    assert len(only(families, "llm:step_prefill_tokens").observed) == 50


def test_an_empty_cache_reads_zero_usage(families) -> None:
    metrics().set_load(0, 0, 0, 0)
    assert only(families, "vllm:kv_cache_usage_perc").value() == 0.0


def test_an_idle_writer_refreshes_the_gauges_from_the_loop_snapshot(families) -> None:
    """A step reports its load before retiring finished requests; the snapshot shows them gone."""
    recorder = metrics(background=True)
    running = only(families, "vllm:num_requests_running")
    recorder.on_step(stats(running=1, kv_blocks_used=10))
    wait_for(lambda: running.value() == 1)
    recorder.watch(lambda: {"running": 0, "waiting": 0, "kv_blocks_used": 0, "kv_blocks_total": 100})
    wait_for(lambda: running.value() == 0)
    recorder.close()
    assert running.value() == 0 and only(families, "vllm:kv_cache_usage_perc").value() == 0.0


def test_a_failing_metric_is_logged_once_and_the_writer_goes_on(families) -> None:
    recorder = metrics(background=True)
    recorder.set_load(1, 0, 0, "not a number")  # fails inside the writer
    recorder.on_step(stats())
    recorder.close()
    assert recorder.failures == 1
    assert only(families, "llm:step_prefill_tokens").observed == [40]
