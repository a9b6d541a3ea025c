"""Triton over gRPC with the asyncio client: what the model is, and embeddings in chunks.

The gateway asks the server what the model is (`get_model_config`: the TYPE_STRING
input, the FP32 output and its size, `max_batch_size`) instead of assuming it, and
re-asks after Triton was unavailable, since a restarted server may serve another
config. A request with more texts than `max_batch_size` becomes several Triton requests
sent at once, so the dynamic batcher can spread them over instances and join them with
other clients' requests; the answers are put back in input order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import grpc
import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from gateway.errors import APIError, connection_dropped, from_triton

# How long a readiness or config call may take: a probe must answer quickly either way.
CONTROL_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class ModelInfo:
    name: str
    input_name: str
    output_name: str
    dimensions: int
    max_batch_size: int


def model_info(config: model_config_pb2.ModelConfig) -> ModelInfo:
    """The one string input and the one FP32 vector output of an embedding model."""
    texts = [i for i in config.input if i.data_type == model_config_pb2.TYPE_STRING]
    vectors = [o for o in config.output if o.data_type == model_config_pb2.TYPE_FP32]
    if len(texts) != 1 or len(vectors) != 1 or len(vectors[0].dims) != 1:
        raise ValueError(f"model {config.name!r} is not a text embedding model (one TYPE_STRING input, one FP32 [d] output)")
    if config.max_batch_size < 1:
        raise ValueError(f"model {config.name!r} has max_batch_size {config.max_batch_size}; the gateway needs a batching model")
    return ModelInfo(config.name, texts[0].name, vectors[0].name, int(vectors[0].dims[0]), int(config.max_batch_size))


def chunks(count: int, size: int) -> list[slice]:
    return [slice(start, min(start + size, count)) for start in range(0, count, size)]


class TritonEmbedder:
    """One asyncio gRPC channel to Triton for the process; created inside the event loop."""

    def __init__(self, url: str, model: str, retry_after_s: int = 1) -> None:
        self.url = url
        self.model = model
        self.retry_after_s = retry_after_s
        self.client = grpcclient.InferenceServerClient(url)
        self._info: ModelInfo | None = None
        self._info_lock = asyncio.Lock()
        self._left_running: set[asyncio.Task] = set()  # chunks of failed calls, ending by their deadline

    async def close(self) -> None:
        await self.client.close()

    def _unavailable(self, detail: str) -> APIError:
        return APIError(
            503, f"Triton at {self.url} is not available: {detail}", "service_unavailable", None, "triton_unavailable", self.retry_after_s
        )

    async def _call(self, call, timeout_s: float):
        """A control call with its own deadline, errors as APIError."""
        try:
            return await asyncio.wait_for(call, timeout_s + 1.0)
        except InferenceServerException as exc:
            self._info = None
            raise from_triton(exc, self.retry_after_s) from None
        except (asyncio.TimeoutError, grpc.aio.AioRpcError, OSError) as exc:
            self._info = None
            raise self._unavailable(type(exc).__name__) from None

    async def info(self) -> ModelInfo:
        if self._info is not None:
            return self._info
        async with self._info_lock:
            if self._info is None:
                response = await self._call(self.client.get_model_config(self.model, client_timeout=CONTROL_TIMEOUT_S), CONTROL_TIMEOUT_S)
                try:
                    self._info = model_info(response.config)
                except ValueError as exc:
                    raise APIError(500, str(exc), "server_error", None, "unsupported_model") from None
            return self._info

    async def ready(self) -> bool:
        """Triton's own readiness of the model (strict: every step of the ensemble loaded)."""
        try:
            ready = await self._call(self.client.is_model_ready(self.model, client_timeout=CONTROL_TIMEOUT_S), CONTROL_TIMEOUT_S)
        except APIError:
            return False
        if not ready:
            self._info = None
        return bool(ready)

    async def _infer(self, info: ModelInfo, texts: Sequence[bytes], priority: int, deadline: float) -> np.ndarray:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise APIError(504, "the embedding request timed out before it reached Triton", "timeout", None, "timeout")
        tensor = grpcclient.InferInput(info.input_name, [len(texts), 1], "BYTES")
        tensor.set_data_from_numpy(np.array(texts, dtype=np.object_).reshape(-1, 1))
        for attempt in (1, 2):  # once more when the connection dropped under the call
            remaining = deadline - time.monotonic()
            try:
                result = await self.client.infer(
                    self.model,
                    [tensor],
                    outputs=[grpcclient.InferRequestedOutput(info.output_name)],
                    priority=priority,
                    # Triton drops the request from its queue at the same deadline (when the
                    # model's queue policy lets a request lower its timeout).
                    timeout=max(1, int(remaining * 1e6)),
                    client_timeout=max(remaining, 0.001),
                )
                break
            except InferenceServerException as exc:
                if attempt == 1 and connection_dropped(exc) and deadline > time.monotonic():
                    continue
                error = from_triton(exc, self.retry_after_s)
                if error.status == 503:
                    self._info = None
                raise error from None
        return result.as_numpy(info.output_name)

    async def embed(self, texts: Sequence[bytes], priority: int, timeout_s: float) -> np.ndarray:
        """[len(texts), d] float32, in input order; chunks of max_batch_size sent concurrently.
        The first failing chunk fails the call at once. The other chunks are left to end by
        themselves (each carries the call's deadline) rather than cancelled: cancelling a gRPC
        call races Triton 2.51's completion of it, a known server crash (triton-inference-server
        issues 7368 and 8034, fixed in 2.53); only a client that went away cancels them."""
        deadline = time.monotonic() + timeout_s
        info = await self.info()
        tasks = [
            asyncio.ensure_future(self._infer(info, texts[part], priority, deadline)) for part in chunks(len(texts), info.max_batch_size)
        ]
        for task in tasks:  # a chunk failing after the first failure is not "never retrieved"
            task.add_done_callback(lambda done: done.cancelled() or done.exception())
        try:
            _, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()) + 1.0, return_when=asyncio.FIRST_EXCEPTION)
        except BaseException:  # the client went away: nobody waits for these chunks
            for task in tasks:
                task.cancel()
            raise
        self._left_running.update(pending)
        for task in pending:
            task.add_done_callback(self._left_running.discard)
        failed = next((task.exception() for task in tasks if task.done() and task.exception() is not None), None)
        if failed is not None:
            raise failed
        if pending:
            raise APIError(504, f"the embedding request took longer than {timeout_s:g} s", "timeout", None, "timeout")
        parts = [task.result() for task in tasks]
        embeddings = parts[0] if len(parts) == 1 else np.concatenate(parts)
        if embeddings.shape != (len(texts), info.dimensions):
            raise APIError(500, f"Triton answered shape {embeddings.shape} for {len(texts)} texts", "server_error", None, "triton_error")
        return embeddings
