"""A flood of streams against one `llm` instance (Triton 2.51's Python backend once crashed under
~280 concurrent streams; the goal is that it never does again): every stream must end with a
final response, answered or refused with a clear error, and the server must stay live and keep
answering."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio

from tests.integration.llm_streams import TIMEOUT_S, Received, ask, grpc_inputs
from tools.triton_client import fetch_metrics, metric_total

STREAMS = 300  # more than max_num_seqs (16) + max_waiting (256) of the committed config: some are refused
SAMPLING = {"max_tokens": 2, "temperature": 0, "ignore_eos": True}


def _inputs(index: int, sampling: dict = SAMPLING) -> list:
    def tensor(name: str, value, datatype: str):
        item = grpcclient.InferInput(name, [1], datatype)
        item.set_data_from_numpy(np.array([value], dtype=np.object_ if datatype == "BYTES" else bool))
        return item

    return [
        tensor("text_input", f"Request {index}: name a colour.".encode(), "BYTES"),
        tensor("stream", True, "BOOL"),
        tensor("sampling_parameters", json.dumps(sampling).encode(), "BYTES"),
    ]


async def _one_stream(client: grpcaio.InferenceServerClient, index: int) -> str:
    """How this request's own gRPC stream ended: "answered", "refused: <error>" or "no final"."""
    finished = asyncio.Event()

    async def one_request():
        yield {"model_name": "llm", "inputs": _inputs(index), "request_id": f"flood-{index}", "enable_empty_final_response": True}
        await finished.wait()

    responses = client.stream_infer(one_request())
    try:
        async for result, error in responses:
            if error is not None:  # the model sends every error as its request's final response
                return f"refused: {error}"
            if result.get_response().parameters["triton_final_response"].bool_param:
                return "answered"
        return "no final"
    finally:
        finished.set()
        responses.cancel()


async def _flood(grpc_url: str) -> list[str]:
    client = grpcaio.InferenceServerClient(grpc_url)
    try:
        return await asyncio.wait_for(asyncio.gather(*(_one_stream(client, i) for i in range(STREAMS))), TIMEOUT_S)
    finally:
        await client.close()


async def _walk_away(client: grpcaio.InferenceServerClient, index: int, first_answers: asyncio.Event) -> None:
    """A long request whose client cancels its stream once the first answers arrive."""

    async def one_request():
        sampling = {"max_tokens": 200, "temperature": 0, "ignore_eos": True}
        yield {"model_name": "llm", "inputs": _inputs(index, sampling), "request_id": f"gone-{index}"}
        await first_answers.wait()

    responses = client.stream_infer(one_request())

    async def read() -> None:
        async for _ in responses:
            first_answers.set()

    reader = asyncio.ensure_future(read())
    await first_answers.wait()
    responses.cancel()
    reader.cancel()
    await asyncio.gather(reader, return_exceptions=True)


async def _flood_and_leave(grpc_url: str) -> None:
    client = grpcaio.InferenceServerClient(grpc_url)
    first_answers = asyncio.Event()
    try:
        await asyncio.wait_for(asyncio.gather(*(_walk_away(client, i, first_answers) for i in range(STREAMS))), TIMEOUT_S)
    finally:
        await client.close()


def test_a_flood_of_streams_ends_each_with_a_final_response_and_leaves_the_server_serving(llm_triton) -> None:
    outcomes = asyncio.run(_flood(llm_triton.options.grpc_url))

    kinds = Counter(outcome.split(":")[0] for outcome in outcomes)
    assert kinds["no final"] == 0, kinds
    assert kinds["answered"] + kinds["refused"] == STREAMS, kinds
    assert kinds["answered"] >= 16, kinds  # at least a full batch was served
    refusals = {outcome for outcome in outcomes if outcome.startswith("refused")}
    assert all("server busy" in refusal for refusal in refusals), refusals

    assert grpcclient.InferenceServerClient(llm_triton.options.grpc_url).is_model_ready("llm")
    after = ask(llm_triton.options.grpc_url, grpc_inputs("The capital of France is", sampling={"max_tokens": 4, "temperature": 0}))
    assert after.error is None and after.text.strip()


def _answer_once_not_busy(grpc_url: str, within_s: float = 120.0) -> Received:
    """A short request, sent again while the server refuses it as busy: after a flood whose
    clients left, the server may still hold requests it has not yet found abandoned (Triton
    hands over the stream's requests after the client has gone), and "server busy" is the
    clear, retryable answer to a full waiting queue."""
    deadline = time.monotonic() + within_s
    while True:
        received = ask(grpc_url, grpc_inputs("The capital of France is", sampling={"max_tokens": 4, "temperature": 0}))
        if received.error is None or "server busy" not in received.error or time.monotonic() > deadline:
            return received
        time.sleep(0.5)


def test_a_flood_whose_clients_all_leave_mid_stream_is_retired_and_the_server_keeps_serving(llm_triton) -> None:
    asyncio.run(_flood_and_leave(llm_triton.options.grpc_url))

    after = _answer_once_not_busy(llm_triton.options.grpc_url)
    assert after.error is None and after.text.strip()

    def idle(samples) -> bool:
        return metric_total(samples, "vllm:num_requests_running") == 0 and metric_total(samples, "vllm:num_requests_waiting") == 0

    samples = fetch_metrics(llm_triton.options.metrics_url)
    for _ in range(600):
        if idle(samples):
            break
        time.sleep(0.2)
        samples = fetch_metrics(llm_triton.options.metrics_url)
    assert idle(samples), "every cancelled request left the running and waiting sets"
    assert metric_total(samples, "vllm:kv_cache_usage_perc") == 0
