"""Drive one load level against a streaming client: closed loop or open-loop Poisson.

Requests leave for `seconds` (closed loop: N streams, each sending the next request when its
last one ended; open loop: the seeded arrival offsets of tools.load.schedules, whatever the
server does). Then the level drains: answers still streaming after `drain_s` more are
cancelled and recorded as `cut`, so a target that falls behind (one sequence at a time
under 32 streams) ends on time instead of queueing for many minutes. Request k of a level
is the workload's request `first_request + k` for every target: levels that follow one another
on one server start at different places in the workload, so no level sends a prompt an
earlier one left in the server's prefix cache (with the same prompts, a light level after a
heavy one measured TTFTs of cache hits: 0.26-0.32 s live against 1.4-2.1 s of prefill).

A level may open with `warmup_s` of the same load whose requests are served but not scored
(perf_analyzer's stable window, GenAI-Perf's warm-up): N closed-loop streams that all start
at once queue N prompts at the first step, a transient that would otherwise dominate a
minute-long level's TTFT.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tools.load.llm.clients import StreamClient
from tools.load.llm.records import CUT, StreamRecord
from tools.load.llm.workload import LlmRequest
from tools.load.outcomes import classify_exception
from tools.load.schedules import ClosedLoop, Poisson

Schedule = ClosedLoop | Poisson


def level_label(schedule: Schedule) -> str:
    if isinstance(schedule, ClosedLoop):
        return f"{schedule.concurrency} stream{'s' if schedule.concurrency != 1 else ''}"
    return f"Poisson {schedule.rate:g} req/s"


@dataclass
class LevelRun:
    schedule: Schedule
    records: list[StreamRecord] = field(default_factory=list)
    duration_s: float = 0.0  # from the level's start to its last answer (or the drain limit)
    late_sends: int = 0  # open loop: sends more than 10 ms behind their offset (the client could not keep up)
    load_average: float | None = None  # the machine's 1-minute load average when the level started (shared machines)
    warmup_requests: int = 0  # sent during the warm-up: served, not in `records`
    sent: int = 0  # requests sent, warm-up included: the next level may start this far on


class LevelDriver:
    def __init__(
        self,
        client: StreamClient,
        requests: Sequence[LlmRequest],
        seconds: float,
        drain_s: float,
        seed: int = 0,
        warmup_s: float = 0.0,
        first_request: int = 0,
    ) -> None:
        if not requests:
            raise ValueError("a load level needs a workload of at least one request")
        if first_request < 0:
            raise ValueError(f"a level's first request is a workload index >= 0, got {first_request}")
        if seconds <= 0 or drain_s < 0 or warmup_s < 0:
            raise ValueError(f"a level lasts > 0 s, drains >= 0 s and warms up >= 0 s, got {seconds:g}, {drain_s:g} and {warmup_s:g}")
        self.client, self.requests = client, requests
        self.seconds, self.drain_s, self.seed, self.warmup_s = seconds, drain_s, seed, warmup_s
        self.first_request = first_request

    async def run(self, schedule: Schedule) -> LevelRun:
        result = LevelRun(schedule, load_average=round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None)
        started = time.perf_counter()

        def clock() -> float:
            return time.perf_counter() - started

        counter = iter(range(10**9))

        async def one() -> None:
            index = next(counter)
            result.sent = index + 1
            request = self.requests[(self.first_request + index) % len(self.requests)]
            record = StreamRecord(index, clock())
            result.records.append(record)
            try:
                await self.client.generate(request, record, clock)
            except asyncio.CancelledError:
                record.outcome, record.message = CUT, f"still streaming {self.drain_s:g} s after the level's end"
            except Exception as exc:  # a server's error answer and a transport failure alike are outcomes
                record.outcome, record.message = classify_exception(exc)
                record.message = record.message[:300]

        sending_s = self.warmup_s + self.seconds
        tasks: set[asyncio.Task] = set()
        if isinstance(schedule, ClosedLoop):

            async def stream() -> None:
                while clock() < sending_s:
                    await one()

            tasks.update(asyncio.create_task(stream()) for _ in range(schedule.concurrency))
        else:
            for offset in schedule.offsets(sending_s, np.random.default_rng(self.seed)):
                delay = float(offset) - clock()
                if delay > 0:
                    await asyncio.sleep(delay)
                elif delay < -0.010:
                    result.late_sends += 1
                tasks.add(asyncio.create_task(one()))
        limit = sending_s + self.drain_s - clock()
        _, pending = await asyncio.wait(tasks, timeout=max(limit, 0.0)) if tasks else (set(), set())
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        result.duration_s = max(clock(), sending_s) - self.warmup_s  # an open loop's window counts even if it went quiet
        warm = [record for record in result.records if record.sent_s < self.warmup_s]
        result.warmup_requests = len(warm)
        result.records = [record for record in result.records if record.sent_s >= self.warmup_s]
        return result
