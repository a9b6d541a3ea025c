"""Priorities and queue deadlines on the real Triton: one running slot (`max_num_seqs` 1,
policy `priority`, loaded as a config override) held by a long low-priority stream. A request
with `queue_timeout_ms` that cannot be scheduled in time fails fast, naming the knob; an urgent
request preempts the long one, finishes first, and the long one still completes."""

from __future__ import annotations

import json
import time

import pytest

from tests.integration.llm_streams import LlmStream, generate, grpc_inputs, wait_for_metrics
from tools.triton_client import fetch_metrics, metric_total

LONG = {"max_tokens": 96, "ignore_eos": True, "temperature": 0, "priority": 10}


@pytest.fixture(scope="module")
def one_slot(llm_triton):
    client = llm_triton.client
    committed = client.config("llm")
    small = type(committed)()
    small.CopyFrom(committed)
    small.parameters["max_num_seqs"].string_value = "1"
    small.parameters["policy"].string_value = "priority"
    small.parameters["kv_cache_bytes"].string_value = str(64 * 2**20)
    with client.restoring("llm", committed):
        client.load("llm", small)
        yield llm_triton


def test_a_request_not_scheduled_within_its_queue_timeout_fails_fast_naming_it(one_slot) -> None:
    timeouts = metric_total(fetch_metrics(one_slot.options.metrics_url), "vllm:request_success", finished_reason="timeout")
    holder = LlmStream(one_slot.options.grpc_url)
    try:
        _, long = holder.send(grpc_inputs("Count from one to a thousand.", sampling=LONG))
        holder.wait(lambda: len(long.times) >= 2)  # precondition: the one slot is taken
        sent = time.monotonic()
        sampling = json.dumps({"max_tokens": 4, "priority": 10, "queue_timeout_ms": 300})
        status, (answer,) = generate(one_slot.options.http_url, {"text_input": "Hi", "sampling_parameters": sampling})
        assert status != 200, answer  # the model says UNAVAILABLE; Triton 2.51's /generate answers any model error with 400
        assert "server busy" in answer["error"] and "queue_timeout_ms=300" in answer["error"]
        assert not long.done, "the timeout came while the slot was still held, not after it freed"
        assert time.monotonic() - sent >= 0.3
        samples = wait_for_metrics(one_slot, lambda s: metric_total(s, "vllm:request_success", finished_reason="timeout") > timeouts)
        assert metric_total(samples, "vllm:request_success", finished_reason="timeout") == timeouts + 1
    finally:
        holder.close(cancel=True)


def test_an_urgent_request_preempts_the_running_batch_one_and_both_finish(one_slot) -> None:
    preemptions = metric_total(fetch_metrics(one_slot.options.metrics_url), "vllm:num_preemptions")
    batch, urgent_stream = LlmStream(one_slot.options.grpc_url), LlmStream(one_slot.options.grpc_url)
    try:
        _, long = batch.send(grpc_inputs("Count from one to a thousand.", sampling=LONG))
        batch.wait(lambda: len(long.times) >= 2)  # precondition: the batch request holds the slot
        _, urgent = urgent_stream.send(grpc_inputs("Hi", sampling={"max_tokens": 4, "temperature": 0, "ignore_eos": True, "priority": 0}))
        urgent_stream.wait(lambda: urgent.done)
        assert urgent.error is None and urgent.texts
        assert not long.done, "the urgent request did not wait for the batch one to finish"
        batch.wait(lambda: long.done)
        assert long.error is None and long.final_at > urgent.final_at
        samples = wait_for_metrics(one_slot, lambda s: metric_total(s, "vllm:num_preemptions") > preemptions)
        assert metric_total(samples, "vllm:num_preemptions") >= preemptions + 1
    finally:
        batch.close(cancel=True)
        urgent_stream.close(cancel=True)
