"""What only the `llm` model on vLLM's engine (configs/vllm.pbtxt) shows on the real Triton: the
served config names the engine, greedy decoding agrees with transformers' answer, the live
control channel is refused while other streams go on, the priority policy reaches vLLM's
scheduler and queue_timeout_ms bounds the wait for the first token. What both engines do alike
(streaming, /generate, cancellation, bad input, metrics) is tested on both by the `llm_server`
tests (test_llm_serving.py, test_llm_bad_input.py)."""

from __future__ import annotations

import json

import pytest

from tests.integration.llm_streams import LlmStream, ask, generate, grpc_inputs

PROMPT = "The capital of France is"
GREEDY = {"max_tokens": 8, "temperature": 0}
LONG = {"max_tokens": 200, "ignore_eos": True, "temperature": 0}


@pytest.fixture
def stream(vllm_triton):
    connection = LlmStream(vllm_triton.options.grpc_url)
    yield connection
    connection.close(cancel=True)


def test_the_served_config_names_the_engine(vllm_triton) -> None:
    config = vllm_triton.client.config("llm")
    assert config.parameters["engine"].string_value == "vllm"
    assert config.model_transaction_policy.decoupled


def test_greedy_decoding_gives_the_answer_transformers_gives(stream) -> None:
    """ " Paris.\n\nThe answer is: 201" is transformers' and vLLM's greedy continuation (DESIGN.md)."""
    _, received = stream.send(grpc_inputs(PROMPT, sampling={"max_tokens": 12, "temperature": 0}, return_finish_reason=True))
    stream.wait(lambda: received.done)
    assert received.error is None and received.text.startswith(" Paris.")
    assert received.outputs[-1]["finish_reason"].reshape(-1)[0] == b"length"


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
