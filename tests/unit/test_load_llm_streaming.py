"""Streaming LLM load through the one load driver, against a fake client, and Triton's
generate_stream client against a local SSE server (aiohttp on 127.0.0.1). Assertions are
about counts, order, outcomes and clocks, never about speed."""

from __future__ import annotations

import asyncio
import json

import aiohttp.web
import pytest

from tools.load.llm.clients import GenerateStreamClient, StreamError
from tools.load.llm.records import StreamRecord
from tools.load.llm.streaming import run_streaming
from tools.load.llm.workload import LlmRequest
from tools.load.outcomes import CLIENT_TIMEOUT
from tools.load.schedules import ClosedLoop, Phase, Trace

REQUESTS = [LlmRequest(i, f"Request {i}. hello", 3, max_tokens=2 + i % 3) for i in range(4)]


class FakeClient:
    """Streams `max_tokens` tokens, one per event-loop turn; `hang` requests stop after one token."""

    name = "fake"

    def __init__(self, hang: frozenset[int] = frozenset()) -> None:
        self.hang = hang
        self.in_flight = self.max_in_flight = 0

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def generate(self, request: LlmRequest, record: StreamRecord, clock) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            for _ in range(request.max_tokens):
                await asyncio.sleep(0.001)
                record.add_tokens(clock(), 1)
                while request.index in self.hang:
                    await asyncio.sleep(0.01)
            record.tokens_in, record.end_s, record.finish_reason = request.prompt_tokens, clock(), "length"
        finally:
            self.in_flight -= 1


def test_a_closed_loop_of_a_fixed_count_gives_one_complete_record_per_request_on_the_runs_clock() -> None:
    client = FakeClient()
    run = run_streaming(client, REQUESTS, [Phase(ClosedLoop(2, requests=6), 60.0)])
    assert [r.index for r in run.records] == list(range(6)) and client.max_in_flight == 2
    for r in run.records:
        assert r.completed and r.finish_reason == "length" and r.arrival_s is None
        assert r.tokens_out == REQUESTS[r.index % len(REQUESTS)].max_tokens  # the workload, cycled
        assert 0.0 <= r.sent_s < r.token_times[0] <= r.token_times[-1] <= r.end_s <= run.duration_s


def test_an_open_loop_records_each_requests_scheduled_arrival_beside_its_send() -> None:
    arrivals = (0.0, 0.02, 0.05)
    run = run_streaming(FakeClient(), REQUESTS, [Phase(Trace(arrivals, cycle=False), 0.06)])
    assert [r.arrival_s for r in run.records] == pytest.approx(list(arrivals))
    assert all(r.sent_s >= r.arrival_s and r.completed for r in run.records)


def test_a_stream_past_its_deadline_is_a_client_timeout_that_keeps_the_tokens_it_delivered() -> None:
    client = FakeClient(hang=frozenset({0}))
    run = run_streaming(client, REQUESTS, [Phase(ClosedLoop(1, requests=1), 60.0)], deadline_s=0.2)
    (r,) = run.records
    assert r.outcome == CLIENT_TIMEOUT and not r.completed and r.end_s is None
    assert r.tokens_out == 1 and client.in_flight == 0  # cancelled, not abandoned


# --- Triton's generate_stream (SSE) client ---------------------------------------------------


def sse(*events: dict) -> bytes:
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events)


def stream_once(body: bytes, status: int = 200) -> tuple[StreamRecord, list[dict], Exception | None]:
    async def scenario():
        seen: list[dict] = []

        async def generate_stream(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
            seen.append(await request.json())
            if status != 200:
                return aiohttp.web.Response(status=status, text='{"error":"unknown model"}')
            response = aiohttp.web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            await response.write(body)
            await response.write_eof()
            return response

        app = aiohttp.web.Application()
        app.router.add_post("/v2/models/llm/generate_stream", generate_stream)
        runner = aiohttp.web.AppRunner(app)
        await runner.setup()
        site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        client = GenerateStreamClient(f"127.0.0.1:{port}")
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


def event(text: str, tokens: object, reason: str = "None", **extra: object) -> dict:
    return {"model_name": "llm", "model_version": "1", "text_output": text, "finish_reason": reason, "num_output_tokens": tokens, **extra}


def test_generate_stream_asks_for_exactly_the_tokens_and_counts_them_from_each_event() -> None:
    body = sse(event("a", 1, num_input_tokens=3), event(" b c", [2]), event(" d", 1, "length"))
    record, seen, error = stream_once(body)
    assert error is None
    (sent,) = seen
    assert json.loads(sent.pop("sampling_parameters")) == {"max_tokens": 4, "temperature": 0.0, "ignore_eos": True}
    assert sent == {
        "text_input": "Request 0. hi",
        "stream": True,
        "exclude_input_in_output": True,
        "return_finish_reason": True,
        "return_num_input_tokens": True,
        "return_num_output_tokens": True,
    }
    assert record.tokens_out == 4 and record.tokens_in == 3 and record.finish_reason == "length" and record.end_s == 1.0


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"", 400, "HTTP 400"),
        (sse({"error": "Request was cancelled: server stopping"}), 200, "server stopping"),
        (sse(event("a", 1)), 200, "without a final response"),
    ],
)
def test_generate_stream_raises_with_the_servers_reason_on_an_error_or_an_unfinished_stream(body: bytes, status: int, message: str) -> None:
    _, _, error = stream_once(body, status)
    assert isinstance(error, StreamError) and message in str(error)
