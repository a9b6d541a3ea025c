"""Bad input to the `llm` model, on each engine: a clear error naming the problem (HTTP 400
through /generate, an error response over the gRPC stream), nothing hangs, and other streams
keep going."""

from __future__ import annotations

import json

import pytest

from llm.serving.knobs import parameters_from_pbtxt, parse_knobs
from tests.integration.llm_streams import LlmStream, generate, grpc_inputs
from tools.paths import MODEL_REPOSITORY

SCHEDULER, ENGINE = parse_knobs(parameters_from_pbtxt(MODEL_REPOSITORY / "llm" / "config.pbtxt"))
TOO_LONG = "hello " * (ENGINE.max_model_len + 100)  # one token per word at least

# (case, prompt, sampling_parameters, a part of the error message)
BAD = [
    ("empty prompt", "", None, "text_input is empty"),
    ("prompt over the context window", TOO_LONG, None, f"context window (max_model_len) is {ENGINE.max_model_len}"),
    ("max_tokens zero", "Hi", {"max_tokens": 0}, "max_tokens must be in [1,"),
    ("max_tokens negative", "Hi", {"max_tokens": -3}, "max_tokens must be in [1,"),
    ("max_tokens over the limit", "Hi", {"max_tokens": ENGINE.max_model_len * 4}, "max_tokens must be in [1,"),
    ("prompt plus max_tokens over the window", "Hi " * 100, {"max_tokens": ENGINE.max_model_len - 10}, "lower max_tokens"),
    ("sampling not JSON", "Hi", "{max_tokens: 3", "sampling_parameters is not valid JSON"),
    ("sampling not an object", "Hi", "[3]", "sampling_parameters must be a JSON object"),
    ("unknown key", "Hi", {"max_token": 3}, "unknown key(s) max_token"),
    ("wrong type", "Hi", {"max_tokens": "three"}, "max_tokens must be an integer"),
    ("wrong type of flag", "Hi", {"ignore_eos": "yes"}, "ignore_eos must be true or false"),
    ("negative temperature", "Hi", {"temperature": -0.5}, "temperature must be >= 0"),
    ("top_p zero", "Hi", {"top_p": 0}, "top_p must be in (0, 1]"),
    ("top_p above one", "Hi", {"top_p": 1.5}, "top_p must be in (0, 1]"),
]


def as_text(sampling) -> str | None:
    return None if sampling is None else sampling if isinstance(sampling, str) else json.dumps(sampling)


@pytest.mark.parametrize(("case", "prompt", "sampling", "message"), BAD, ids=[case[0] for case in BAD])
def test_generate_answers_bad_input_with_400_naming_the_problem(llm_server, case, prompt, sampling, message) -> None:
    body = {"text_input": prompt}
    if sampling is not None:
        body["sampling_parameters"] = as_text(sampling)
    status, (answer,) = generate(llm_server.options.http_url, body)
    assert status == 400, answer
    assert message in answer["error"]


def test_bad_input_over_grpc_gets_one_final_error_each_while_another_stream_goes_on(llm_server) -> None:
    good, bad = LlmStream(llm_server.options.grpc_url), LlmStream(llm_server.options.grpc_url)
    try:
        _, running = good.send(grpc_inputs("Describe a forest.", sampling={"max_tokens": 32, "ignore_eos": True}))
        good.wait(lambda: len(running.times) >= 1)
        cases = [*((case, prompt.encode(), as_text(sampling), message) for case, prompt, sampling, message in BAD)]
        cases.append(("bytes that are not UTF-8", b"caf\xe9 au lait", None, "text_input is not valid UTF-8 (byte 0xe9 at offset 3)"))
        cases.append(("sampling not UTF-8", b"Hi", b"\xff", "sampling_parameters is not valid UTF-8"))
        for case, prompt, sampling, message in cases:
            _, received = bad.send(grpc_inputs(prompt, sampling=sampling))
            error = bad.next_error()
            assert message in error, case
            assert not received.texts, case
        good.wait(lambda: running.done)
        assert running.error is None and len(running.times) >= 2
    finally:
        good.close(cancel=True)
        bad.close(cancel=True)


def test_streaming_with_the_prompt_included_is_refused(llm_server) -> None:
    connection = LlmStream(llm_server.options.grpc_url)
    try:
        connection.send(grpc_inputs("Hi", exclude_input_in_output=False))
        assert "exclude_input_in_output=false cannot be used with stream=true" in connection.next_error()
    finally:
        connection.close()


def test_requests_beyond_the_waiting_bound_are_refused_as_unavailable(llm_triton) -> None:
    """Every running slot is held by a long request and max_waiting more wait; the next ones
    are refused at once, naming the bound; cancelling the stream frees everything. The bound is
    made small by a config override: the committed 256 would take about 280 concurrent streams,
    and such a flood crashed Triton 2.51's Python backend (boost lock_exception, docs/llm.md)."""
    client = llm_triton.client
    committed = client.config("llm")
    small = type(committed)()
    small.CopyFrom(committed)
    small.parameters["max_num_seqs"].string_value = "2"
    small.parameters["max_waiting"].string_value = "4"
    with client.restoring("llm", committed):
        client.load("llm", small)
        connection = LlmStream(llm_triton.options.grpc_url)
        try:
            long = {"max_tokens": 256, "ignore_eos": True}
            for _ in range(2 + 4 + 8):
                connection.send(grpc_inputs("Hi", sampling=long))
            error = connection.next_error(timeout_s=120)
            assert "max_waiting" in error and "4 requests are already waiting" in error
        finally:
            connection.close(cancel=True)
