"""The one load driver: runs phases of closed- or open-loop schedules against a Sender and
keeps one record per request.

Open loop: each request leaves at its precomputed offset in its own task, whatever the
server does, and a send more than 10 ms behind schedule is counted, so a client that
cannot keep up says so instead of silently lowering the load. Closed loop: N clients,
each sending its next request when the last returns. Every request ends in exactly one
record (its outcome from tools.load.outcomes); a request that outlives `deadline_s` is
recorded as a client timeout, so a run always ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

from tools.load.mix import Request, RequestMix
from tools.load.outcomes import CLIENT_TIMEOUT, OK, classify_exception
from tools.load.results import Results
from tools.load.schedules import ClosedLoop, Phase

T = TypeVar("T")

LATE_SEND_S = 0.010
DEADLINE_S = 120.0


@dataclass
class Prepared:
    """A request ready to send: built before the clock starts, so building is not latency.
    `request` is what is sent and recorded: a sender may fix its priority or timeout by kind."""

    request: Request
    model: str
    payload: Any = None
    rows: int = 1
    tokens: int | None = None  # real tokens, when the factory knows them
    label: str = ""  # the factory's class of this request (e.g. a length class)


class Sender(Protocol):
    """Sends one prepared request and raises on any failure (the engine classifies it)."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    def prepare(self, request: Request) -> Prepared: ...

    async def send(self, prepared: Prepared) -> None: ...


@dataclass(frozen=True)
class Record:
    """One request. Times are seconds from the start of the run."""

    index: int
    kind: str
    priority: int
    model: str
    phase: int
    sent_s: float
    latency_s: float
    outcome: str
    rows: int = 1
    tokens: int | None = None
    label: str = ""
    scheduled_s: float | None = None  # open loop: when it was due
    message: str = ""  # the error message of a failed request

    @property
    def done_s(self) -> float:
        return self.sent_s + self.latency_s


@dataclass
class Run:
    records: list[Record] = field(default_factory=list)
    seconds: float = 0.0
    sent: int = 0
    late_sends: int = 0  # open loop: sends more than LATE_SEND_S behind their offset
    max_lag_s: float = 0.0

    def results(self, start_s: float | None = None, end_s: float | None = None) -> Results:
        """Results of the requests sent in [start_s, end_s) (default: the whole run)."""
        start = 0.0 if start_s is None else start_s
        end = self.seconds if end_s is None else end_s
        return Results.of([r for r in self.records if start <= r.sent_s < end], end - start)

    def array(self, name: str) -> np.ndarray:
        return np.asarray([getattr(r, name) for r in self.records])


class LoadDriver:
    """Drives `phases` against `sender`; `run()` returns when every request has a record.
    `records`, `started` and `now()` may be read while it runs (e.g. to measure windows)."""

    def __init__(
        self, sender: Sender, phases: Sequence[Phase], mix: RequestMix | None = None, deadline_s: float = DEADLINE_S, seed: int = 0
    ) -> None:
        if not phases:
            raise ValueError("a load needs at least one phase")
        self.sender, self.phases = sender, list(phases)
        self.mix = mix or RequestMix()
        self.deadline_s, self.seed = deadline_s, seed
        self.result = Run()
        self.started = 0.0
        self._request = self.mix.requests()
        self._tasks: set[asyncio.Task] = set()
        self._count = 0
        self.ready = asyncio.Event()  # set once the run's clock has started

    @property
    def records(self) -> list[Record]:
        return self.result.records

    def now(self) -> float:
        return time.perf_counter() - self.started

    async def _send(self, phase: int, scheduled: float | None) -> None:
        request = self._request(self._count)
        self._count += 1
        self.result.sent += 1
        prepared = self.sender.prepare(request)
        sent = time.perf_counter()
        message = ""
        try:
            await asyncio.wait_for(self.sender.send(prepared), self.deadline_s)
            outcome = OK
        except asyncio.TimeoutError:
            outcome, message = CLIENT_TIMEOUT, f"no answer within {self.deadline_s:g} s"
        except Exception as exc:  # tritonclient's exception and transport errors alike are outcomes
            outcome, message = classify_exception(exc)
        done = time.perf_counter()
        request = prepared.request  # the sender may have fixed what its kind implies (e.g. a priority)
        self.records.append(
            Record(
                request.index,
                request.kind,
                request.priority,
                prepared.model,
                phase,
                sent - self.started,
                done - sent,
                outcome,
                prepared.rows,
                prepared.tokens,
                prepared.label,
                scheduled,
                message[:300],
            )
        )

    async def _wait(self, stop: asyncio.Event, until: float) -> bool:
        """Sleep until `until` (run time); True when stopped first."""
        delay = until - self.now()
        if delay > 0:
            try:
                await asyncio.wait_for(stop.wait(), delay)
            except asyncio.TimeoutError:
                pass
        return stop.is_set()

    async def _closed(self, index: int, schedule: ClosedLoop, end: float, stop: asyncio.Event) -> None:
        budget = [schedule.requests]  # requests left to send in this phase (None: no limit)

        async def client() -> None:
            while not stop.is_set() and self.now() < end and budget[0] != 0:
                if budget[0] is not None:
                    budget[0] -= 1
                await self._send(index, None)

        clients = [asyncio.create_task(client()) for _ in range(schedule.concurrency)]
        self._tasks.update(clients)
        await asyncio.gather(*clients)  # each client stops after its request in flight at the end (or the stop)
        self._tasks.difference_update(clients)

    async def _open(self, index: int, offsets: np.ndarray, start: float, end: float, stop: asyncio.Event) -> None:
        for offset in offsets:
            due = start + float(offset)
            if await self._wait(stop, due):
                return
            lag = self.now() - due
            if lag > LATE_SEND_S:
                self.result.late_sends += 1
            self.result.max_lag_s = max(self.result.max_lag_s, lag)
            task = asyncio.create_task(self._send(index, due))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        await self._wait(stop, end)

    async def run(self, stop: asyncio.Event | None = None) -> Run:
        """Every phase in turn (until `stop` is set), then wait for the requests in flight."""
        stop = stop or asyncio.Event()
        rng = np.random.default_rng(self.seed)
        self.started = time.perf_counter()
        await self.sender.open()
        try:
            self.started = time.perf_counter()
            self.ready.set()
            planned = 0.0
            for index, phase in enumerate(self.phases):
                if stop.is_set():
                    break
                start = planned if self.now() <= planned + LATE_SEND_S else self.now()  # on plan unless running late
                end = planned = start + phase.seconds
                if isinstance(phase.schedule, ClosedLoop):
                    await self._closed(index, phase.schedule, end, stop)
                    planned = self.now()  # a closed loop ends when its clients have stopped
                else:
                    await self._open(index, phase.schedule.offsets(phase.seconds, rng), start, end, stop)
            await asyncio.gather(*list(self._tasks))
        except BaseException:
            # a failure (or a cancel) of the caller ends the run: nothing may keep sending
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
            raise
        finally:
            self.result.seconds = self.now()
            await self.sender.close()
        return self.result


def drive(sender: Sender, phases: Sequence[Phase], mix: RequestMix | None = None, deadline_s: float = DEADLINE_S, seed: int = 0) -> Run:
    """Run the phases to the end (blocking) and return every request's record."""
    return run_until_complete(LoadDriver(sender, phases, mix, deadline_s, seed).run())


def run_until_complete(coroutine: Coroutine[Any, Any, T]) -> T:
    """asyncio.run for the load tools. A stop signal raised inside a task's step (Ctrl-C, or
    SIGTERM as tools.serve.interrupts' Interrupted, likeliest while a load sets itself up)
    ends each task it passes through with that exception, which asyncio would log as "Task
    exception was never retrieved" with a traceback: for a normal stop. The exception
    itself still leaves here, so the command exits with the signal's status."""

    async def main() -> T:
        asyncio.get_running_loop().set_exception_handler(_quiet_about_stops)
        return await coroutine

    return asyncio.run(main())


def _quiet_about_stops(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    if isinstance(context.get("exception"), (KeyboardInterrupt, SystemExit)):
        return  # the stop itself propagates out of run_until_complete
    loop.default_exception_handler(context)
