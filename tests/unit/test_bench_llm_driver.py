"""The level driver against fake streaming clients, and the OpenAI client against a local
SSE server (aiohttp on 127.0.0.1). Nothing depends on speed: fakes stream when the event
loop lets them, and assertions are about counts, order and outcomes."""

from __future__ import annotations

import asyncio
import json

import aiohttp.web
import numpy as np
import pytest

from tools.bench.llm.driver import LevelDriver
from tools.load.llm.clients import OpenAIStreamClient, StreamError
from tools.load.llm.records import CUT, StreamRecord
from tools.load.llm.workload import LlmRequest
from tools.load.schedules import ClosedLoop, Poisson

REQUESTS = [LlmRequest(i, f"Request {i}. hello", 3, max_tokens=2 + i % 3) for i in range(7)]


class FakeClient:
    """Streams `max_tokens` tokens, one per event-loop turn; `hang` requests never end."""

    name = "fake"

    def __init__(self, hang: set[int] = frozenset(), fail: set[int] = frozenset()) -> None:
        self.hang, self.fail = hang, fail
        self.in_flight = self.max_in_flight = 0
        self.seen: list[int] = []

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def generate(self, request: LlmRequest, record: StreamRecord, clock) -> None:
        self.seen.append(request.index)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if request.index in self.fail:
                raise StreamError("server busy: 256 requests are waiting")
            while request.index in self.hang:
                await asyncio.sleep(0.01)
            for _ in range(request.max_tokens):
                await asyncio.sleep(0)
                record.add_tokens(clock(), 1)
            record.tokens_in, record.end_s, record.finish_reason = request.prompt_tokens, clock(), "length"
        finally:
            self.in_flight -= 1


def test_a_closed_loop_keeps_exactly_its_streams_busy_and_sends_the_workload_in_order() -> None:
    client = FakeClient()
    run = asyncio.run(LevelDriver(client, REQUESTS, seconds=0.2, drain_s=5.0).run(ClosedLoop(3)))
    assert client.max_in_flight == 3
    assert sorted(r.index for r in run.records) == list(range(len(run.records)))
    assert client.seen == [i % len(REQUESTS) for i in range(len(client.seen))]  # the workload, cycled
    assert all(r.completed and r.tokens_out == REQUESTS[r.index % len(REQUESTS)].max_tokens for r in run.records)
    assert run.duration_s >= 0.2


def test_an_open_loop_sends_the_seeded_poisson_arrivals_whatever_the_answers() -> None:
    client = FakeClient(hang={1})
    schedule = Poisson(40.0)
    run = asyncio.run(LevelDriver(client, REQUESTS, seconds=0.5, drain_s=0.1, seed=7).run(schedule))
    expected = schedule.offsets(0.5, np.random.default_rng(7))
    assert len(run.records) == len(expected)  # one request hanging does not hold the others back
    assert client.max_in_flight >= 1


def test_answers_still_streaming_after_the_drain_are_cut_and_the_level_ends() -> None:
    client = FakeClient(hang={0})
    run = asyncio.run(LevelDriver(client, REQUESTS, seconds=0.05, drain_s=0.2).run(ClosedLoop(1)))
    assert [r.outcome for r in run.records] == [CUT]
    assert run.records[0].end_s is None and "still streaming" in run.records[0].message
    assert client.in_flight == 0  # the stream was cancelled, not abandoned


def test_a_server_error_becomes_the_requests_outcome_and_the_stream_goes_on() -> None:
    client = FakeClient(fail={0})
    run = asyncio.run(LevelDriver(client, REQUESTS, seconds=0.1, drain_s=5.0).run(ClosedLoop(1)))
    assert run.records[0].outcome == "error" and "server busy" in run.records[0].message
    assert len(run.records) > 1
    assert all(r.completed == (r.index % len(REQUESTS) != 0) for r in run.records)  # request 0 fails each time round


# --- the OpenAI streaming client against a local SSE server ---------------------------------


def sse(*chunks: object) -> bytes:
    return b"".join(f"data: {json.dumps(c) if not isinstance(c, str) else c}\n\n".encode() for c in chunks)


async def serve_once(body: bytes, status: int = 200):
    """A one-route server answering /v1/completions with `body`; returns (runner, base URL, bodies seen)."""
    seen: list[dict] = []

    async def completions(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        seen.append(await request.json())
        if status != 200:
            return aiohttp.web.Response(status=status, text="no slot available")
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(body)
        await response.write_eof()
        return response

    app = aiohttp.web.Application()
    app.router.add_post("/v1/completions", completions)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}", seen


def stream_once(body: bytes, status: int = 200) -> tuple[StreamRecord, list[dict], Exception | None]:
    async def scenario():
        runner, base, seen = await serve_once(body, status)
        client = OpenAIStreamClient(base)
        await client.open()
        record, error = StreamRecord(0, 0.0), None
        try:
            await client.generate(LlmRequest(0, "Request 0. hi", 3, 4), record, lambda: 1.0)
        except StreamError as exc:
            error = exc
        finally:
            await client.close()
            await runner.cleanup()
        return record, seen, error

    return asyncio.run(scenario())


def choice(text: str, finish: str | None = None) -> dict:
    return {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}


def test_the_openai_client_asks_for_exactly_the_tokens_greedily_with_eos_ignored() -> None:
    body = sse(choice("a"), choice(" b"), choice(" c"), choice(" d", "length"), "[DONE]")
    record, seen, error = stream_once(body)
    assert error is None
    assert seen == [
        {
            "model": "default",
            "prompt": "Request 0. hi",
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": 4,
            "temperature": 0.0,
            "ignore_eos": True,
        }
    ]
    assert record.tokens_out == 4 and record.finish_reason == "length" and record.completed


def test_tokens_without_their_own_chunk_are_taken_from_the_usage_at_the_end() -> None:
    usage = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4}}
    record, _, error = stream_once(sse(choice("a"), choice("é", "length"), usage, "[DONE]"))
    assert error is None and record.tokens_in == 5 and record.tokens_out == 4


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"", 503, "HTTP 503: no slot available"),
        (sse({"error": {"message": "context overflow"}}), 200, "context overflow"),
        (sse(choice("a")), 200, "without [DONE]"),
    ],
)
def test_an_error_answer_or_a_stream_that_stops_early_raises_with_the_reason(body: bytes, status: int, message: str) -> None:
    _, _, error = stream_once(body, status)
    assert isinstance(error, StreamError) and message in str(error)


class PacedClient(FakeClient):
    """Streams a token every millisecond: a window holds hundreds of requests, not tens of thousands,
    so a pause of the machine cannot swallow one window whole."""

    async def generate(self, request: LlmRequest, record: StreamRecord, clock) -> None:
        await asyncio.sleep(0.001)
        await super().generate(request, record, clock)


def test_requests_sent_during_the_warm_up_are_served_but_not_scored() -> None:
    client = PacedClient()
    run = asyncio.run(LevelDriver(client, REQUESTS, seconds=1.0, drain_s=5.0, warmup_s=0.5).run(ClosedLoop(2)))
    assert run.warmup_requests > 0 and run.records  # both windows sent requests
    assert len(client.seen) == run.warmup_requests + len(run.records)  # every request was served
    assert all(record.sent_s >= 0.5 for record in run.records)
    assert min(record.index for record in run.records) == run.warmup_requests  # the scored ones are the later ones
    assert 1.0 <= run.duration_s < 6.0  # the scored window, not the whole level


def test_a_negative_warm_up_is_refused() -> None:
    with pytest.raises(ValueError, match="warms up"):
        LevelDriver(FakeClient(), REQUESTS, seconds=1.0, drain_s=1.0, warmup_s=-1.0)


def test_a_level_starts_at_its_first_request_and_says_how_many_it_sent_so_the_next_can_go_on_from_there() -> None:
    client = FakeClient()
    run = asyncio.run(LevelDriver(client, REQUESTS, seconds=0.05, drain_s=5.0, first_request=5).run(ClosedLoop(3)))
    assert run.sent == len(client.seen) >= 3  # three streams each send one at the start, however fast the machine
    assert client.seen[:3] == [5, 6, 0]  # from request 5 on, wrapping at the workload's end
    with pytest.raises(ValueError, match="first request"):
        LevelDriver(client, REQUESTS, seconds=1.0, drain_s=1.0, first_request=-1)
