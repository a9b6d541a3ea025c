"""Ending an answered stream: the server's end is awaited, a cancel is only the fallback."""

from __future__ import annotations

import asyncio

from tools.triton_client.streams import end_after_final


class Stream:
    """A stream_infer() iterator whose server ends it after `left` responses, never (None), or
    with an error."""

    def __init__(self, left: int | None = 0, error: Exception | None = None) -> None:
        self.left, self.error, self.cancelled = left, error, False

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> tuple:
        if self.error is not None:
            raise self.error
        if self.left is None:
            await asyncio.sleep(3600)
        if self.left == 0:
            raise StopAsyncIteration
        self.left -= 1
        return (None, None)

    def cancel(self) -> bool:
        self.cancelled = True
        return True


def test_a_stream_the_server_ends_is_read_to_its_end_and_not_cancelled():
    stream = Stream(left=2)  # e.g. an empty final response still on its way
    assert asyncio.run(end_after_final(stream, timeout_s=1.0)) is True
    assert stream.left == 0 and not stream.cancelled


def test_a_stream_the_server_leaves_open_is_cancelled_after_the_timeout_with_a_warning(caplog):
    stream = Stream(left=None)
    assert asyncio.run(end_after_final(stream, timeout_s=0.05)) is False
    assert stream.cancelled
    assert "did not end within" in caplog.text  # the cancel that can leave a model unable to unload is on record


def test_a_stream_that_fails_after_its_answer_is_cancelled_and_not_raised():
    stream = Stream(error=RuntimeError("connection reset"))
    assert asyncio.run(end_after_final(stream, timeout_s=1.0)) is False
    assert stream.cancelled
