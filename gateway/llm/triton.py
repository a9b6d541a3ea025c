"""Triton's `llm` model over gRPC bidirectional streaming (tritonclient.grpc.aio): one stream
per generation, the model's pieces of text as they come.

The `llm` model is decoupled, so Triton's unary infer refuses it: every generation, streamed
to the client or not, is a gRPC stream with `stream: true`, and a non-streaming answer is the
pieces joined. Closing a Generation before its final piece cancels the gRPC call, which the
model sees as `is_cancelled()` at its next step and answers by freeing the sequence (counted
as finish reason `abort` in `vllm:request_success_total`); after the final piece the stream
is left for Triton to end (tools/triton_client/streams.py says why).

Errors on a stream carry only Triton's message (the stream's error has no status code), so
they are classified by the `llm` model's own words: `server busy` is its waiting queue full
(429), `cannot serve` its loop stopping (503); every other refusal is its INVALID_ARG (400).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from gateway.errors import RATE_LIMIT, SERVER_ERROR, TIMEOUT, UNAVAILABLE, APIError, from_triton
from llm.contract import EngineConfig
from tools.triton_client.streams import end_after_final

CONTROL_TIMEOUT_S = 3.0
DEFAULT_MAX_MODEL_LEN = EngineConfig().max_model_len  # what the `llm` model serves when its config omits it
FLAGS = ("stream", "exclude_input_in_output", "return_finish_reason", "return_num_input_tokens", "return_num_output_tokens")
NOT_FINISHED = ("", "None")  # every response carries a finish_reason, "None" until the last (the vLLM backend's rule)


@dataclass(frozen=True)
class Piece:
    """One response of the model: new text, tokens since the previous piece, the end."""

    text: str
    completion_tokens: int
    prompt_tokens: int | None
    finish_reason: str | None  # None until the last piece


@dataclass(frozen=True)
class LlmInfo:
    name: str
    max_model_len: int


def llm_info(config: model_config_pb2.ModelConfig) -> LlmInfo:
    """The generative model's context window, read from its config (`parameters.max_model_len`)."""
    names = {i.name for i in config.input}
    if "text_input" not in names or not config.model_transaction_policy.decoupled:
        raise ValueError(f"model {config.name!r} is not a decoupled text generation model (vLLM backend I/O: text_input, ...)")
    value = config.parameters["max_model_len"].string_value if "max_model_len" in config.parameters else ""
    return LlmInfo(config.name, int(value) if value.strip() else DEFAULT_MAX_MODEL_LEN)


def error_from_message(message: str, retry_after_s: int) -> APIError:
    """A stream's error (message only) as the status an OpenAI client acts on."""
    text = message.lower()
    if "server busy" in text or "exceeds maximum queue size" in text:
        return APIError(429, f"The model's queue is full; retry later ({message}).", RATE_LIMIT, None, "queue_full", retry_after_s)
    if "timed out" in text or "deadline" in text or "timeout" in text:
        return APIError(504, f"The generation timed out in Triton ({message}).", TIMEOUT, None, "timeout")
    if "cannot serve" in text or "not ready" in text or "unknown model" in text or "not found" in text or "stopping" in text:
        return APIError(503, f"The model is not available: {message}", UNAVAILABLE, None, "triton_unavailable", retry_after_s)
    if "engine failed" in text or "cancelled" in text:
        return APIError(500, f"The model failed the request: {message}", SERVER_ERROR, None, "triton_error")
    return APIError(400, message, "invalid_request_error", refused_field(message), "invalid_value")


def refused_field(message: str) -> str | None:
    """The OpenAI field a refusal of the `llm` model is about: its messages name vLLM's keys."""
    named = re.search(r"sampling_parameters\.(\w+)", message)
    if named:
        return named.group(1)
    if "max_tokens" in message:
        return "max_tokens"
    if "text_input" in message or "the prompt" in message:
        return "prompt"
    return None


def _text(array: np.ndarray | None) -> str:
    if array is None or not array.size:
        return ""
    return b"".join(item if isinstance(item, bytes) else str(item).encode() for item in array.reshape(-1)).decode("utf-8", "replace")


_ENDING: set[asyncio.Task] = set()  # streams answered in full, waiting for Triton to end them


def _tensor(name: str, value: object, datatype: str) -> grpcclient.InferInput:
    item = grpcclient.InferInput(name, [1], datatype)
    item.set_data_from_numpy(np.array([value], dtype=np.object_ if datatype == "BYTES" else bool))
    return item


class Generation:
    """One request's stream of Pieces; `close()` (or leaving `async with`) before the last
    piece cancels it in Triton."""

    def __init__(self, client: grpcaio.InferenceServerClient, model: str, prompt: str, sampling: dict, retry_after_s: int, deadline: float):
        self.retry_after_s = retry_after_s
        self.deadline = deadline
        self.finished = False
        self._answered = False  # the final piece came
        self._sent_all = asyncio.Event()
        inputs = [
            _tensor("text_input", prompt.encode("utf-8"), "BYTES"),
            _tensor("sampling_parameters", json.dumps(sampling).encode(), "BYTES"),
            *(_tensor(flag, True, "BOOL") for flag in FLAGS),
        ]

        async def one_request() -> AsyncIterator[dict]:
            yield {"model_name": model, "inputs": inputs}
            await self._sent_all.wait()  # our half of the stream stays open until the answer is complete

        self._responses = client.stream_infer(one_request())

    def __aiter__(self) -> Generation:
        return self

    async def __anext__(self) -> Piece:
        if self.finished:
            raise StopAsyncIteration
        left = self.deadline - time.monotonic()
        try:
            if left <= 0:
                raise asyncio.TimeoutError
            result, error = await asyncio.wait_for(self._responses.__anext__(), left)
        except asyncio.TimeoutError:
            await self.close()
            raise APIError(504, "The generation took longer than the gateway's --llm-timeout.", TIMEOUT, None, "timeout") from None
        except StopAsyncIteration:
            await self.close()
            raise APIError(502, "Triton closed the stream before the last response.", SERVER_ERROR, None, "triton_error") from None
        except InferenceServerException as exc:
            await self.close()
            raise from_triton(exc, self.retry_after_s) from None
        except grpc.aio.AioRpcError as exc:
            await self.close()
            raise APIError(
                503, f"Triton is not available: {exc.details()}", UNAVAILABLE, None, "triton_unavailable", self.retry_after_s
            ) from None
        if error is not None:
            await self.close()
            raise error_from_message(error.message() or str(error), self.retry_after_s)
        reason = _text(result.as_numpy("finish_reason"))
        counts = result.as_numpy("num_output_tokens")
        prompt_tokens = result.as_numpy("num_input_tokens")
        piece = Piece(
            _text(result.as_numpy("text_output")),
            int(counts.sum()) if counts is not None else 0,
            int(prompt_tokens.reshape(-1)[0]) if prompt_tokens is not None and prompt_tokens.size else None,
            None if reason in NOT_FINISHED else reason,
        )
        if piece.finish_reason is not None:
            self._answered = True
            await self.close()
        return piece

    async def close(self) -> None:
        """Idempotent. After the final piece, Triton ends the stream (awaited in the background,
        not cancelled: tools/triton_client/streams.py); before it, a cancellation."""
        if self.finished:
            return
        self.finished = True
        self._sent_all.set()
        if not self._answered:
            self._responses.cancel()
            return
        ending = asyncio.get_running_loop().create_task(end_after_final(self._responses))
        _ENDING.add(ending)  # a reference until it is done: the event loop keeps only weak ones
        ending.add_done_callback(_ENDING.discard)


class TritonGenerator:
    """One asyncio gRPC channel to Triton for the LLM; created inside the event loop."""

    def __init__(self, url: str, model: str, retry_after_s: int = 1) -> None:
        self.url, self.model, self.retry_after_s = url, model, retry_after_s
        self.client = grpcaio.InferenceServerClient(url)
        self._info: LlmInfo | None = None

    async def close(self) -> None:
        await self.client.close()

    async def _control(self, call):
        try:
            return await asyncio.wait_for(call, CONTROL_TIMEOUT_S + 1.0)
        except InferenceServerException as exc:
            self._info = None
            raise from_triton(exc, self.retry_after_s) from None
        except (asyncio.TimeoutError, grpc.aio.AioRpcError, OSError) as exc:
            self._info = None
            raise APIError(
                503,
                f"Triton at {self.url} is not available: {type(exc).__name__}",
                UNAVAILABLE,
                None,
                "triton_unavailable",
                self.retry_after_s,
            ) from None

    async def ready(self) -> bool:
        try:
            return bool(await self._control(self.client.is_model_ready(self.model, client_timeout=CONTROL_TIMEOUT_S)))
        except APIError:
            return False

    async def info(self) -> LlmInfo:
        if self._info is None:
            response = await self._control(self.client.get_model_config(self.model, client_timeout=CONTROL_TIMEOUT_S))
            try:
                self._info = llm_info(response.config)
            except ValueError as exc:
                raise APIError(500, str(exc), SERVER_ERROR, None, "unsupported_model") from None
        return self._info

    async def generate(self, prompt: str, sampling: dict, timeout_s: float) -> tuple[Piece, Generation]:
        """The first piece (so errors surface before a client sees a status line) and the rest."""
        generation = Generation(self.client, self.model, prompt, sampling, self.retry_after_s, time.monotonic() + timeout_s)
        try:
            first = await generation.__anext__()
        except BaseException:
            await generation.close()
            raise
        return first, generation
