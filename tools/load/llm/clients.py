"""Streaming clients: one request in, its tokens' arrival times out, whatever the protocol.

- TritonStreamClient: gRPC bidirectional streaming (tritonclient.grpc.aio) to a model with
  the I/O of Triton's vLLM backend (our `llm`): one stream per request, the request's tokens
  counted from `num_output_tokens` (a response may carry several), the end marked by the
  response whose `finish_reason` is set (every response carries one, "None" until the last).
- GenerateStreamClient: Triton's `POST /v2/models/<model>/generate_stream` (server-sent
  events, one JSON event per response, the same fields as the gRPC outputs; an error is an
  event with an `error` field).
- OpenAIStreamClient: `POST /v1/completions` with `stream: true` and the raw prompt
  (llama.cpp's llama-server, vLLM, any OpenAI-compatible server): one SSE chunk per token,
  token counts checked against the final `usage`. A new connection per request: llama-server
  closes a kept-alive connection after a stream, and a reused one would fail the next request.

All run greedy (temperature 0) with EOS ignored, so every target generates exactly the
requested tokens. Cancelling `generate` (the driver's drain limit) closes the stream, which
the server sees as a client that went away.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import numpy as np

from tools.load.llm.records import StreamRecord
from tools.load.llm.workload import LlmRequest
from tools.triton_client.streams import end_after_final

Clock = Callable[[], float]


class StreamError(RuntimeError):
    """The server answered the request with an error (the message is the server's)."""


class StreamClient(Protocol):
    name: str  # the protocol, for reports

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def generate(self, request: LlmRequest, record: StreamRecord, clock: Clock) -> None:
        """Stream one request's answer into `record` (token times, counts, end); raise on failure."""
        ...


def sampling_parameters(request: LlmRequest) -> dict:
    """What every Triton target is asked: exactly `max_tokens` greedy tokens (on the request's
    LoRA adapter, when it names one)."""
    adapter = {} if request.lora_name is None else {"lora_name": request.lora_name}
    return {"max_tokens": request.max_tokens, "temperature": 0.0, "ignore_eos": True, **adapter}


class TritonStreamClient:
    name = "gRPC bidirectional streaming (tritonclient.grpc.aio)"

    def __init__(self, grpc_url: str, model: str = "llm") -> None:
        self.grpc_url, self.model = grpc_url, model
        self._client = None

    async def open(self) -> None:
        import tritonclient.grpc.aio as grpcaio

        self._client = grpcaio.InferenceServerClient(self.grpc_url)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def inputs(self, request: LlmRequest) -> list:
        import tritonclient.grpc as grpcclient

        def tensor(name: str, value: object, datatype: str):
            item = grpcclient.InferInput(name, [1], datatype)
            item.set_data_from_numpy(np.array([value], dtype=np.object_ if datatype == "BYTES" else bool))
            return item

        flags = ("stream", "exclude_input_in_output", "return_finish_reason", "return_num_input_tokens", "return_num_output_tokens")
        return [
            tensor("text_input", request.prompt.encode(), "BYTES"),
            tensor("sampling_parameters", json.dumps(sampling_parameters(request)).encode(), "BYTES"),
            *(tensor(flag, True, "BOOL") for flag in flags),
        ]

    async def generate(self, request: LlmRequest, record: StreamRecord, clock: Clock) -> None:
        if self._client is None:
            raise RuntimeError("open() the client first")
        finished = asyncio.Event()

        async def one_request() -> AsyncIterator[dict]:
            yield {"model_name": self.model, "inputs": self.inputs(request), "request_id": f"bench-{request.index}"}
            await finished.wait()  # keep our half of the stream open until the answer is complete

        responses = self._client.stream_infer(one_request())
        final = False
        try:
            async for result, error in responses:
                now = clock()
                if error is not None:
                    raise StreamError(error.message() if callable(getattr(error, "message", None)) else str(error))
                counts = result.as_numpy("num_output_tokens")
                record.add_tokens(now, int(counts.sum()) if counts is not None else 1)
                tokens_in = result.as_numpy("num_input_tokens")
                if tokens_in is not None:
                    record.tokens_in = int(tokens_in.reshape(-1)[0])
                reason = _text(result.as_numpy("finish_reason"))
                if reason not in NOT_FINISHED:  # as the vLLM backend, every response carries it: "None" until the last
                    record.finish_reason = reason
                    record.end_s = now
                    final = True
                    break
            else:
                raise StreamError("the stream ended without a final response")
        finally:
            finished.set()  # our half of the stream ends
            if not final:
                responses.cancel()  # an error, or the level cut the request: cancel it on the server
        await end_after_final(responses)  # not a cancel: tools/triton_client/streams.py


NOT_FINISHED = ("", "None")


def _text(array: np.ndarray | None) -> str:
    if array is None or not array.size:
        return ""
    value = array.reshape(-1)[0]
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


async def sse_events(response) -> AsyncIterator[bytes]:
    """The `data:` payloads of a server-sent-events body, one per event, as they arrive."""
    async for raw in response.content:
        line = raw.strip()
        if line.startswith(b"data:"):
            yield line[5:].strip()


class HttpStreamSession:
    """What every HTTP streaming client shares: one aiohttp session with no connection reuse
    (closing a connection is a server's signal that its client left) and no overall timeout
    (a stream lasts as long as its answer; the load driver's deadline bounds it)."""

    def __init__(self, base_url: str, path: str, model: str) -> None:
        base = base_url if "://" in base_url else f"http://{base_url}"
        self.url, self.model = f"{base.rstrip('/')}{path}", model
        self._session = None

    async def open(self) -> None:
        import aiohttp

        connector = aiohttp.TCPConnector(force_close=True, limit=0)
        self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _count(value: object) -> int:
    """A token count of a JSON response: a number, or a list of them (Triton writes a tensor
    of shape [-1] as a list)."""
    if isinstance(value, list):
        return sum(int(v) for v in value)
    return int(value)


class GenerateStreamClient(HttpStreamSession):
    name = "Triton /v2/models/<model>/generate_stream (SSE, aiohttp)"

    def __init__(self, http_url: str, model: str = "llm") -> None:
        super().__init__(http_url, f"/v2/models/{model}/generate_stream", model)

    def body(self, request: LlmRequest) -> dict:
        return {
            "text_input": request.prompt,
            "stream": True,
            "sampling_parameters": json.dumps(sampling_parameters(request)),
            "exclude_input_in_output": True,
            "return_finish_reason": True,
            "return_num_input_tokens": True,
            "return_num_output_tokens": True,
        }

    async def generate(self, request: LlmRequest, record: StreamRecord, clock: Clock) -> None:
        if self._session is None:
            raise RuntimeError("open() the client first")
        async with self._session.post(self.url, json=self.body(request)) as response:
            if response.status != 200:
                raise StreamError(f"HTTP {response.status}: {(await response.text())[:300]}")
            async for data in sse_events(response):
                now = clock()
                event = json.loads(data)
                if "error" in event:
                    raise StreamError(str(event["error"]))
                counts = event.get("num_output_tokens")
                record.add_tokens(now, _count(counts) if counts is not None else 1)
                if event.get("num_input_tokens") is not None:
                    record.tokens_in = _count(event["num_input_tokens"])
                reason = event.get("finish_reason")
                reason = reason[0] if isinstance(reason, list) and reason else reason
                if reason not in (None, *NOT_FINISHED):
                    record.finish_reason, record.end_s = str(reason), now
                    return
        raise StreamError("the stream ended without a final response")


class OpenAIStreamClient(HttpStreamSession):
    name = "OpenAI /v1/completions, stream: true (aiohttp, one connection per request)"

    def __init__(self, base_url: str, model: str = "default") -> None:
        super().__init__(base_url, "/v1/completions", model)

    def body(self, request: LlmRequest) -> dict:
        return {
            "model": request.lora_name or self.model,  # an OpenAI server names an adapter as its model
            "prompt": request.prompt,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": request.max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
        }

    async def generate(self, request: LlmRequest, record: StreamRecord, clock: Clock) -> None:
        if self._session is None:
            raise RuntimeError("open() the client first")
        async with self._session.post(self.url, json=self.body(request)) as response:
            if response.status != 200:
                raise StreamError(f"HTTP {response.status}: {(await response.text())[:300]}")
            usage = None
            async for data in sse_events(response):
                now = clock()
                if data == b"[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    raise StreamError(str(chunk["error"]))
                for choice in chunk.get("choices") or ():
                    if choice.get("text"):
                        record.add_tokens(now, 1)
                    if choice.get("finish_reason"):
                        record.finish_reason = choice["finish_reason"]
                usage = chunk.get("usage") or usage
            else:
                raise StreamError("the stream ended without [DONE]")
        record.end_s = clock()
        if usage:
            record.tokens_in = usage.get("prompt_tokens")
            # tokens whose text came inside another chunk (a character split across tokens) arrive with the last one
            missing = usage.get("completion_tokens", 0) - record.tokens_out
            record.add_tokens(record.token_times[-1] if record.token_times else record.end_s, missing)
