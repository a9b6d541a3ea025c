"""A server-sent-event response that stops its source as soon as the client goes away.

Starlette's StreamingResponse notices a closed connection only when it next writes (ASGI 2.4),
which for a generation still in its prefill can be seconds later. Here a watcher that waits
for `http.disconnect` (started by the handler before the first token, see
`gateway.app.Gateway.until_disconnected`) races every next event: the moment the client is
gone, the source is closed, and closing it cancels the Triton stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def wait_for_disconnect(request: Request) -> None:
    """Returns once the client closed the connection (the body must have been read before)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


class EventStream(Response):
    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[bytes], disconnected: asyncio.Task, on_close: Callable[[], Awaitable[None]]) -> None:
        """`on_close` runs however the response ends, even when no event was ever sent."""
        self.events = events
        self.disconnected = disconnected
        self.on_close = on_close
        self.status_code = 200
        self.background = None
        self.init_headers(SSE_HEADERS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            while True:
                following = asyncio.ensure_future(anext(self.events))
                await asyncio.wait({following, self.disconnected}, return_when=asyncio.FIRST_COMPLETED)
                if not following.done():  # the client left first
                    following.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await following
                    return
                try:
                    chunk = following.result()
                except StopAsyncIteration:
                    break
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the connection broke under a write: the client is gone too
            return
        finally:
            self.disconnected.cancel()
            await self.events.aclose()  # type: ignore[attr-defined]
            await self.on_close()
