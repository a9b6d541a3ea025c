"""The LLM's live control channel on the real Triton: a control request changes the token
budget between steps (seen in the step-composition histogram) while a stream keeps running."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest

from tests.conftest import start_triton
from tests.integration.llm_streams import LlmStream, Received, grpc_inputs
from tools.triton_client import fetch_metrics

KEY = "adapt-llm-test-key"
BUDGET = 32
PREFILL = "llm:step_prefill_tokens"


@pytest.fixture(scope="module")
def controlled_llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """Its own server: the control key must be in Triton's environment when it starts."""
    previous = os.environ.get("LLM_CONTROL_KEY")
    os.environ["LLM_CONTROL_KEY"] = KEY
    try:
        server = start_triton(
            tmp_path_factory.mktemp("adapt-llm") / "triton.log", with_llm=True, model_control_mode="explicit", load_models=("llm",)
        )
    finally:
        if previous is None:
            del os.environ["LLM_CONTROL_KEY"]
        else:
            os.environ["LLM_CONTROL_KEY"] = previous
    try:
        yield server
    finally:
        server.stop()


def prefill_steps(server) -> tuple[float, float]:
    """(steps in all, steps with at most BUDGET prefill tokens) from the histogram."""
    total = within = 0.0
    for name, labels, value in fetch_metrics(server.options.metrics_url):
        if name == f"{PREFILL}_count":
            total += value
        elif name == f"{PREFILL}_bucket" and labels.get("le") not in (None, "+Inf") and float(labels["le"]) == BUDGET:
            within += value
    return total, within


def send_control(stream: LlmStream, body: dict, key: str) -> Received:
    """A control request on the stream (LlmStream.send takes no request parameters)."""
    request_id = f"control-{time.monotonic_ns()}"
    with stream._lock:
        stream.requests[request_id] = received = Received()
    parameters = {"llm_control": json.dumps(body), "llm_control_key": key}
    stream.client.async_stream_infer(
        "llm", grpc_inputs("-", stream=False), request_id=request_id, parameters=parameters, enable_empty_final_response=True
    )
    return received


def test_a_control_request_shrinks_the_prefill_budget_while_a_stream_keeps_running(controlled_llm) -> None:
    stream = LlmStream(controlled_llm.options.grpc_url)
    try:
        _, running = stream.send(grpc_inputs("Tell me about the sea.", sampling={"max_tokens": 48, "ignore_eos": True}))
        stream.wait(lambda: len(running.times) >= 2)
        control = send_control(stream, {"max_num_batched_tokens": BUDGET}, KEY)
        stream.wait(lambda: control.done)
        assert control.error is None and json.loads(control.text)["max_num_batched_tokens"] == BUDGET
        assert not running.done, "precondition: the stream is still running after the change"
        before_total, before_within = prefill_steps(controlled_llm)
        long_prompt = " ".join(["the quick brown fox jumps over the lazy dog"] * 20)  # ~180 tokens: one step at the old budget
        _, long = stream.send(grpc_inputs(long_prompt, sampling={"max_tokens": 2, "ignore_eos": True}))
        stream.wait(lambda: long.done and running.done)
        assert long.error is None and running.error is None
        assert len(running.times) >= 2 and running.final_at > control.final_at
        deadline = time.monotonic() + 30
        while (steps := prefill_steps(controlled_llm))[0] - before_total < 180 // BUDGET and time.monotonic() < deadline:
            time.sleep(0.2)
        total, within = steps
        assert total - before_total >= 180 // BUDGET, "the long prompt ran in chunks of at most the new budget"
        assert total - before_total == within - before_within, f"no step after the change had more than {BUDGET} prefill tokens"
    finally:
        stream.close(cancel=True)


def test_a_control_request_with_a_wrong_key_is_refused(controlled_llm) -> None:
    stream = LlmStream(controlled_llm.options.grpc_url)
    try:
        send_control(stream, {"max_num_batched_tokens": 64}, "wrong")
        assert "refused" in stream.next_error(timeout_s=60)
    finally:
        stream.close(cancel=True)
