"""The `llm` model on vLLM's engine (configs/vllm.pbtxt) on the real Triton: the same I/O as the
native engine over gRPC streaming, /generate and /generate_stream; a client that leaves aborts
its request in vLLM; bad input gets a 400 naming it while other streams go on; the priority
policy reaches vLLM's scheduler; the metrics carry the same names as the native engine's."""

from __future__ import annotations

import json
import time

import pytest

from llm.serving.knobs import parameters_from_pbtxt
from llm.vllm_engine.knobs import VllmKnobs
from tests.integration.llm_streams import LlmStream, ask, generate, grpc_inputs
from tools.paths import MODEL_REPOSITORY
from tools.triton_client import fetch_metrics, metric_total

VLLM_CONFIG = MODEL_REPOSITORY / "llm" / "configs" / "vllm.pbtxt"
KNOBS = VllmKnobs.from_parameters(parameters_from_pbtxt(VLLM_CONFIG))
PROMPT = "The capital of France is"
GREEDY = {"max_tokens": 8, "temperature": 0}
LONG = {"max_tokens": 200, "ignore_eos": True, "temperature": 0}


@pytest.fixture
def stream(vllm_triton):
    connection = LlmStream(vllm_triton.options.grpc_url)
    yield connection
    connection.close(cancel=True)


def wait_for_metrics(server, condition, timeout_s: float = 120.0) -> list:
    deadline = time.monotonic() + timeout_s
    while True:
        samples = fetch_metrics(server.options.metrics_url)
        if condition(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.1)


def test_the_served_config_names_the_engine(vllm_triton) -> None:
    config = vllm_triton.client.config("llm")
    assert config.parameters["engine"].string_value == "vllm"
    assert config.model_transaction_policy.decoupled


def test_a_grpc_stream_sends_the_greedy_answer_token_by_token_and_ends_with_a_final_response(stream) -> None:
    _, received = stream.send(grpc_inputs(PROMPT, sampling=GREEDY, return_finish_reason=True, return_num_output_tokens=True))
    stream.wait(lambda: received.done)
    assert received.error is None
    assert "Paris" in received.text
    assert len(received.texts) > 1, "streamed, not sent at once"
    assert sum(int(out["num_output_tokens"][0]) for out in received.outputs) == 8
    assert received.outputs[-1]["finish_reason"].reshape(-1)[0] == b"length"


def test_generate_answers_once_and_generate_stream_sends_the_same_text_in_pieces(vllm_triton) -> None:
    url = vllm_triton.options.http_url
    sampling = json.dumps(GREEDY)
    status, (whole,) = generate(url, {"text_input": PROMPT, "sampling_parameters": sampling, "return_num_input_tokens": True})
    assert status == 200, whole
    assert whole["text_output"].startswith(PROMPT) and len(whole["text_output"]) > len(PROMPT)
    assert whole["num_input_tokens"] == 5
    status, events = generate(url, {"text_input": PROMPT, "stream": True, "sampling_parameters": sampling}, stream=True)
    assert status == 200 and len(events) > 1
    assert all("error" not in event for event in events), events
    assert PROMPT + "".join(event["text_output"] for event in events) == whole["text_output"]


def test_a_seeded_sample_is_the_same_alone_and_beside_another_stream(stream) -> None:
    seeded = {"max_tokens": 12, "temperature": 1.0, "top_p": 0.95, "seed": 1234, "ignore_eos": True}
    _, alone = stream.send(grpc_inputs("Tell me a story about a cat.", sampling=seeded))
    stream.wait(lambda: alone.done)
    _, other = stream.send(grpc_inputs("List three colours.", sampling={"max_tokens": 24, "temperature": 1.0, "seed": 5}))
    _, again = stream.send(grpc_inputs("Tell me a story about a cat.", sampling=seeded))
    stream.wait(lambda: again.done and other.done)
    assert again.error is None and again.text == alone.text


def test_a_client_that_leaves_aborts_its_request_in_vllm_and_frees_its_kv_blocks(vllm_triton) -> None:
    """Run to its 200th token the request would finish as `length`: one more `abort` and the
    running gauge back at 0 prove the cancellation reached vLLM's scheduler."""
    aborted = metric_total(fetch_metrics(vllm_triton.options.metrics_url), "vllm:request_success", finished_reason="abort")
    connection = LlmStream(vllm_triton.options.grpc_url)
    _, received = connection.send(grpc_inputs("Count from one to a thousand.", sampling=LONG))
    connection.wait(lambda: len(received.times) >= 2)
    running = wait_for_metrics(vllm_triton, lambda s: metric_total(s, "vllm:num_requests_running") == 1)
    assert metric_total(running, "vllm:kv_cache_usage_perc") > 0, "precondition: the stream holds KV blocks"
    connection.close(cancel=True)
    after = wait_for_metrics(vllm_triton, lambda s: metric_total(s, "vllm:request_success", finished_reason="abort") > aborted)
    assert metric_total(after, "vllm:request_success", finished_reason="abort") == aborted + 1
    idle = wait_for_metrics(
        vllm_triton, lambda s: metric_total(s, "vllm:num_requests_running") == 0 and metric_total(s, "vllm:kv_cache_usage_perc") == 0
    )
    assert metric_total(idle, "vllm:num_requests_running") == 0
    assert metric_total(idle, "vllm:kv_cache_usage_perc") == 0


BAD = [
    ("empty prompt", "", None, "text_input is empty"),
    ("prompt over the context window", "hello " * (KNOBS.max_model_len + 100), None, "context window (max_model_len)"),
    ("max_tokens negative", "Hi", {"max_tokens": -3}, "max_tokens must be in [1,"),
    ("sampling not JSON", "Hi", "{max_tokens: 3", "sampling_parameters is not valid JSON"),
    ("unknown key", "Hi", {"max_token": 3}, "unknown key(s) max_token"),
    ("top_p zero", "Hi", {"top_p": 0}, "top_p must be in (0, 1]"),
]


@pytest.mark.parametrize(("case", "prompt", "sampling", "message"), BAD, ids=[case[0] for case in BAD])
def test_generate_answers_bad_input_with_400_naming_the_problem(vllm_triton, case, prompt, sampling, message) -> None:
    body = {"text_input": prompt}
    if sampling is not None:
        body["sampling_parameters"] = sampling if isinstance(sampling, str) else json.dumps(sampling)
    status, (answer,) = generate(vllm_triton.options.http_url, body)
    assert status == 400, answer
    assert message in answer["error"]


def test_bad_input_and_live_control_are_refused_while_another_stream_goes_on(vllm_triton) -> None:
    good = LlmStream(vllm_triton.options.grpc_url)
    try:
        _, running = good.send(grpc_inputs("Describe a forest.", sampling={"max_tokens": 48, "ignore_eos": True}))
        good.wait(lambda: len(running.times) >= 1)
        refused = ask(vllm_triton.options.grpc_url, grpc_inputs(b"caf\xe9 au lait"))
        assert refused.error is not None and "text_input is not valid UTF-8" in refused.error
        status, (answer,) = generate(
            vllm_triton.options.http_url, {"text_input": "Hi", "parameters": {"llm_control": '{"max_num_batched_tokens": 64}'}}
        )
        assert status == 400 and "reload the model with a config override" in answer["error"], answer
        good.wait(lambda: running.done)
        assert running.error is None and len(running.texts) > 1
    finally:
        good.close(cancel=True)


@pytest.fixture
def one_slot_priority(vllm_triton):
    """vLLM with one running slot under the priority policy (a config override, as the tuner loads)."""
    client = vllm_triton.client
    committed = client.config("llm")
    small = type(committed)()
    small.CopyFrom(committed)
    small.parameters["max_num_seqs"].string_value = "1"
    small.parameters["policy"].string_value = "priority"
    with client.restoring("llm", committed):
        client.reload("llm", small)
        yield vllm_triton


def test_the_priority_policy_serves_an_urgent_request_before_an_earlier_waiting_one(one_slot_priority) -> None:
    url = one_slot_priority.options.grpc_url
    holder, waiting = LlmStream(url), LlmStream(url)
    try:
        _, long = holder.send(grpc_inputs("Count from one to a thousand.", sampling={**LONG, "max_tokens": 64, "priority": 5}))
        holder.wait(lambda: len(long.times) >= 2)  # precondition: the one slot is taken
        _, batch = waiting.send(grpc_inputs("Name a colour.", sampling={**GREEDY, "ignore_eos": True, "priority": 10}))
        _, urgent = waiting.send(grpc_inputs("Name a fruit.", sampling={**GREEDY, "ignore_eos": True, "priority": 0}))
        waiting.wait(lambda: batch.done and urgent.done)
        assert batch.error is None and urgent.error is None
        assert urgent.final_at < batch.times[0], "the later, urgent request was served first"
    finally:
        holder.close(cancel=True)
        waiting.close(cancel=True)


def test_a_request_with_no_token_by_its_queue_timeout_fails_fast_as_busy(one_slot_priority) -> None:
    holder = LlmStream(one_slot_priority.options.grpc_url)
    try:
        _, long = holder.send(grpc_inputs("Count from one to a thousand.", sampling={**LONG, "max_tokens": 64}))
        holder.wait(lambda: len(long.times) >= 2)
        sampling = json.dumps({"max_tokens": 4, "queue_timeout_ms": 300})
        status, (answer,) = generate(one_slot_priority.options.http_url, {"text_input": "Hi", "sampling_parameters": sampling})
        assert status != 200 and "server busy" in answer["error"] and "queue_timeout_ms=300" in answer["error"], answer
        assert not long.done, "the timeout came while the slot was still held"
    finally:
        holder.close(cancel=True)


def test_metrics_carry_the_native_engines_names(vllm_triton, stream) -> None:
    _, received = stream.send(grpc_inputs(PROMPT, sampling=GREEDY))
    stream.wait(lambda: received.done)
    samples = wait_for_metrics(vllm_triton, lambda s: metric_total(s, "vllm:e2e_request_latency_seconds_count") > 0)
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
