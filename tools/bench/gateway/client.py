"""The one HTTP/JSON client every target is measured with: unique texts (no cache hits) sent
by the load driver in a closed loop, each answer decoded and checked."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import aiohttp

from tools.bench.gateway.endpoints import EmbeddingEndpoint
from tools.load.driver import Prepared, drive
from tools.load.mix import Request
from tools.load.outcomes import OK
from tools.load.requests import SAMPLE_TEXTS
from tools.load.schedules import ClosedLoop, Phase


@dataclass
class Row:
    target: str
    concurrency: int
    requests: int
    errors: int
    seconds: float
    rps: float
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None = None  # a stall shows here first (reports before it have none)


class Texts:
    """The same mixed English/Chinese texts for every target, each unique (no cache hits)."""

    def __init__(self, per_request: int) -> None:
        self.per_request = per_request
        self.counter = 0
        self.nonce = f"{os.getpid()}-{int(time.time())}"

    def next(self) -> list[str]:
        texts = []
        for _ in range(self.per_request):
            self.counter += 1
            texts.append(f"{SAMPLE_TEXTS[self.counter % len(SAMPLE_TEXTS)]} #{self.nonce}-{self.counter}")
        return texts


class AnswerError(Exception):
    """An answer that is not one embedding per text."""


class HttpSender:
    """The load driver's Sender for an embedding endpoint over HTTP/JSON: the client decodes
    every answer and checks it holds one embedding per text (a wrong answer is an error)."""

    def __init__(self, target: EmbeddingEndpoint, texts: Texts, connections: int) -> None:
        self.target, self.texts, self.connections = target, texts, connections
        self.session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        connector = aiohttp.TCPConnector(limit=self.connections)
        self.session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60))

    async def close(self) -> None:
        await self.session.close()

    def prepare(self, request: Request) -> Prepared:
        batch = self.texts.next()
        return Prepared(request, self.target.name, (batch, self.target.body(batch)), rows=len(batch))

    async def send(self, prepared: Prepared) -> None:
        batch, body = prepared.payload
        async with self.session.post(self.target.url, json=body) as response:
            answer = await response.json(content_type=None)
            if response.status != 200 or len(self.target.vectors(answer)) != len(batch):
                raise AnswerError(f"HTTP {response.status}: not one embedding per text")


def closed_loop(target: EmbeddingEndpoint, concurrency: int, texts: Texts, warmup_s: float, seconds: float) -> Row:
    """`concurrency` clients on the load driver; the warm-up is not counted."""
    run = drive(HttpSender(target, texts, concurrency), [Phase(ClosedLoop(concurrency), warmup_s + seconds)], deadline_s=60.0)
    results = run.results(warmup_s, warmup_s + seconds)
    ok = results.outcomes.get(OK, 0)
    latency = results.latency
    return Row(
        target.name, concurrency, ok, results.failed, seconds, results.throughput_rps, latency.p50_ms, latency.p99_ms, latency.max_ms
    )
