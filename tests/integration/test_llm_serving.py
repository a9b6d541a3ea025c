"""The `llm` model on the real Triton, on each engine (native and vLLM): gRPC streaming,
/generate, /generate_stream, seeded sampling, iteration-level admission, cancellation, metrics."""

from __future__ import annotations

import time

import pytest

from tests.integration.llm_streams import LlmStream, generate, grpc_inputs, wait_for_metrics
from tools.triton_client import fetch_metrics, metric_total

PROMPT = "The capital of France is"
GREEDY = {"max_tokens": 8, "temperature": 0}


@pytest.fixture
def stream(llm_server):
    connection = LlmStream(llm_server.options.grpc_url)
    yield connection
    connection.close(cancel=True)


def metrics(server) -> list:
    return fetch_metrics(server.options.metrics_url)


def test_a_grpc_stream_sends_the_text_in_several_responses_and_ends_with_a_final_one(stream) -> None:
    _, received = stream.send(grpc_inputs(PROMPT, sampling=GREEDY, return_finish_reason=True, return_num_output_tokens=True))
    stream.wait(lambda: received.done)
    assert received.error is None and received.text.strip()
    assert len(received.texts) > 1, "streamed, not sent at once"
    assert sum(int(out["num_output_tokens"][0]) for out in received.outputs) == 8
    assert received.outputs[-1]["finish_reason"].reshape(-1)[0] == b"length"


def test_generate_answers_once_with_the_prompt_before_the_text(llm_server) -> None:
    status, (answer,) = generate(
        llm_server.options.http_url, {"text_input": PROMPT, "sampling_parameters": '{"max_tokens": 8, "temperature": 0}'}
    )
    assert status == 200, answer
    assert answer["text_output"].startswith(PROMPT) and len(answer["text_output"]) > len(PROMPT)


def test_generate_stream_sends_each_delta_as_an_event_adding_up_to_the_greedy_text(llm_server, stream) -> None:
    url = llm_server.options.http_url
    status, events = generate(
        url, {"text_input": PROMPT, "stream": True, "sampling_parameters": '{"max_tokens": 8, "temperature": 0}'}, stream=True
    )
    assert status == 200 and len(events) > 1
    assert all("error" not in event for event in events), events
    _, (whole,) = generate(
        url, {"text_input": PROMPT, "exclude_input_in_output": True, "sampling_parameters": '{"max_tokens": 8, "temperature": 0}'}
    )
    assert "".join(event["text_output"] for event in events) == whole["text_output"]


def test_a_seeded_sample_is_the_same_alone_and_beside_another_stream(stream) -> None:
    seeded = {"max_tokens": 12, "temperature": 1.0, "top_p": 0.95, "seed": 1234, "ignore_eos": True}
    _, alone = stream.send(grpc_inputs("Tell me a story about a cat.", sampling=seeded))
    stream.wait(lambda: alone.done)
    _, other = stream.send(grpc_inputs("List three colours.", sampling={"max_tokens": 24, "temperature": 1.0, "seed": 5}))
    _, again = stream.send(grpc_inputs("Tell me a story about a cat.", sampling=seeded))
    stream.wait(lambda: again.done and other.done)
    assert again.error is None and again.text == alone.text


def test_a_short_request_sent_while_a_long_one_streams_finishes_first(stream) -> None:
    """Iteration-level admission: the short request joins the running batch at the next step
    instead of waiting for the 256-token request to finish."""
    _, long = stream.send(grpc_inputs("Write a long essay about the sea.", sampling={"max_tokens": 256, "ignore_eos": True}))
    stream.wait(lambda: len(long.times) >= 2)
    sent_at = time.monotonic()
    _, short = stream.send(grpc_inputs("Hi", sampling={"max_tokens": 4, "ignore_eos": True}))
    stream.wait(lambda: short.done and long.done)
    assert short.error is None and long.error is None
    assert long.times[0] < sent_at < short.final_at < long.final_at
    assert any(t > short.final_at for t in long.times), "the long stream went on after the short one finished"


def test_cancelling_a_stream_frees_its_slot_and_kv_blocks(llm_server) -> None:
    """A request that ran to its 256th token would finish as `length`: one more `abort` proves the
    cancellation stopped it (the token histograms are written behind the responses, so a sum taken
    before the test may still lack the previous test's requests)."""
    before = metrics(llm_server)
    aborted = metric_total(before, "vllm:request_success", finished_reason="abort")
    connection = LlmStream(llm_server.options.grpc_url)
    _, received = connection.send(grpc_inputs("Count from one to a thousand.", sampling={"max_tokens": 256, "ignore_eos": True}))
    connection.wait(lambda: len(received.times) >= 2)
    running = wait_for_metrics(llm_server, lambda s: metric_total(s, "vllm:num_requests_running") == 1)
    assert metric_total(running, "vllm:kv_cache_usage_perc") > 0, "precondition: the stream holds KV blocks"
    connection.close(cancel=True)
    after = wait_for_metrics(llm_server, lambda s: metric_total(s, "vllm:request_success", finished_reason="abort") > aborted)
    assert metric_total(after, "vllm:request_success", finished_reason="abort") == aborted + 1
    idle = wait_for_metrics(
        llm_server, lambda s: metric_total(s, "vllm:num_requests_running") == 0 and metric_total(s, "vllm:kv_cache_usage_perc") == 0
    )
    assert metric_total(idle, "vllm:num_requests_running") == 0
    assert metric_total(idle, "vllm:kv_cache_usage_perc") == 0


def test_metrics_carry_vllm_names_and_histograms(llm_server, stream) -> None:
    _, received = stream.send(grpc_inputs(PROMPT, sampling=GREEDY))
    stream.wait(lambda: received.done)
    samples = wait_for_metrics(llm_server, lambda s: metric_total(s, "vllm:e2e_request_latency_seconds_count") > 0)
    names = {name for name, _, _ in samples}
    for histogram in (
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:iteration_tokens_total",
        "llm:step_prefill_tokens",
        "llm:step_decode_sequences",
    ):
        assert f"{histogram}_bucket" in names and metric_total(samples, f"{histogram}_count") > 0, histogram
    for gauge in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert gauge in names
    assert metric_total(samples, "vllm:generation_tokens") >= 8 and metric_total(samples, "vllm:prompt_tokens") > 0
    assert metric_total(samples, "vllm:prefix_cache_queries") > 0
