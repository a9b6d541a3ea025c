"""Ending a gRPC stream to a decoupled Triton model without tripping Triton 2.51's frontend.

A client that has its final response should half-close the stream and let the server end it
(status OK), not cancel it: in Triton 2.51 a cancel that meets the end of a stream can leak
the stream's state in the gRPC frontend (fixed upstream in later releases: server pull
requests 7840 and 8078), and the leaked state holds its model, which then never unloads and
keeps Triton from exiting in time (docs/llm.md, Known issues). A cancel stays right for a
request the client gives up on before its final response.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

log = logging.getLogger(__name__)

# How long a server may take to end a stream whose answer is complete. It takes milliseconds on a
# quiet machine; the limit is generous (it was 5 s) because giving up means a cancel, the very
# call that can leak the stream and leave its model unable to unload.
STREAM_END_TIMEOUT_S = 30.0


class ResponseStream(Protocol):
    """tritonclient.grpc.aio's stream_infer() iterator."""

    def __aiter__(self) -> ResponseStream: ...

    async def __anext__(self) -> tuple: ...

    def cancel(self) -> bool: ...


async def end_after_final(responses: ResponseStream, timeout_s: float = STREAM_END_TIMEOUT_S) -> bool:
    """Read `responses` to its end once the client's half is closed; cancel it when the server
    has not ended it within `timeout_s` or it fails. Returns whether the server ended it."""
    try:
        async with asyncio.timeout(timeout_s):
            async for _ in responses:
                pass
    except Exception as exc:  # the timeout, or the stream failing after its answer: nothing left to read
        log.warning(
            "cancelling a stream the server did not end within %.0f s of its final response (%s); in Triton 2.51 "
            "this can leave its model unable to unload (docs/llm.md, Known issues)",
            timeout_s,
            type(exc).__name__,
        )
        responses.cancel()
        return False
    return True
