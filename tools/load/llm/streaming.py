"""Streaming LLM load through the one load driver: schedules, deadlines and outcomes stay
tools.load's, the streaming client fills one StreamRecord per request.

`StreamingSender` is the driver's Sender for a StreamClient: request i of the run is the
workload's request i (cycled when the run sends more). The driver decides when each request
leaves (closed loop, Poisson, gamma, bursty, a trace), bounds it by its deadline (a stream
still open then is cancelled and recorded as a client timeout, its tokens so far kept) and
classifies failures; `run_streaming` then joins each driver record with its stream record:
the outcome and the scheduled arrival come from the driver, every token's time from the
stream, all on the driver's clock (seconds from the run's start).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from tools.load.driver import DEADLINE_S, LoadDriver, Prepared, run_until_complete
from tools.load.llm.clients import StreamClient
from tools.load.llm.records import StreamRecord
from tools.load.llm.workload import LlmRequest
from tools.load.mix import Request
from tools.load.schedules import Phase


class StreamingSender:
    """Streams each request's answer into a StreamRecord kept by request index."""

    def __init__(self, client: StreamClient, requests: Sequence[LlmRequest], model: str = "llm") -> None:
        if not requests:
            raise ValueError("a streaming load needs a workload of at least one request")
        self.client, self.requests, self.model = client, list(requests), model
        self.records: dict[int, StreamRecord] = {}

    async def open(self) -> None:
        await self.client.open()

    async def close(self) -> None:
        await self.client.close()

    def prepare(self, request: Request) -> Prepared:
        llm = self.requests[request.index % len(self.requests)]
        return Prepared(request, self.model, payload=llm, tokens=llm.prompt_tokens, label=f"prompt {llm.index}")

    async def send(self, prepared: Prepared) -> None:
        record = StreamRecord(prepared.request.index, time.perf_counter())  # on perf_counter's clock until the run ends
        self.records[prepared.request.index] = record
        await self.client.generate(prepared.payload, record, time.perf_counter)


@dataclass
class StreamingRun:
    """One load level: a record per request sent, on the run's clock."""

    records: list[StreamRecord] = field(default_factory=list)
    duration_s: float = 0.0  # from the run's start until its last request ended
    late_sends: int = 0  # open loop: sends more than 10 ms behind their arrival (the client could not keep up)


async def stream_load(
    client: StreamClient, requests: Sequence[LlmRequest], phases: Sequence[Phase], deadline_s: float = DEADLINE_S, seed: int = 0
) -> StreamingRun:
    """Drive `phases` of streaming requests; every request sent has exactly one record."""
    sender = StreamingSender(client, requests)
    driver = LoadDriver(sender, phases, deadline_s=deadline_s, seed=seed)
    run = await driver.run()
    records = []
    for sent in sorted(run.records, key=lambda r: r.index):
        record = sender.records.get(sent.index)
        if record is None:  # failed before its stream began: the driver's times are all there is
            record = StreamRecord(sent.index, sent.sent_s)
        else:
            record.shifted(-driver.started)
        record.outcome, record.message = sent.outcome, sent.message
        record.arrival_s = sent.scheduled_s
        records.append(record)
    return StreamingRun(records, run.seconds, run.late_sends)


def run_streaming(
    client: StreamClient, requests: Sequence[LlmRequest], phases: Sequence[Phase], deadline_s: float = DEADLINE_S, seed: int = 0
) -> StreamingRun:
    """stream_load to the end (blocking)."""
    return run_until_complete(stream_load(client, requests, phases, deadline_s, seed))
