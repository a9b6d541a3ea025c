"""Discrete-event simulation of Triton's dynamic batcher over the `embed` pipeline.

Each step (tokenizer, encoder) is a model with its own batcher and instances. The batch
rule follows Triton core's `DynamicBatchScheduler::GetDynamicBatch` (2.51): requests are
taken in priority order (level 1 first; within a level, requests a DELAY timeout moved
aside come after the others) while the batch stays within max_batch_size and, unless
the inputs are ragged, has one shape. The largest preferred size reached is sent at once
unless the oldest request's delay has passed; a batch that cannot grow (max_batch_size,
another shape, the largest preferred size) or whose delay has passed (or is 0) is sent
whole; otherwise the batcher waits for the delay or the next arrival. The batcher forms
a batch only when an instance is free, so queue timeouts are applied then (lazily, as
Triton does). Times are in milliseconds.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from tools.simulate.batcher import DELAY, BatcherSpec
from tools.simulate.cost_model import CostModel

OK, REJECTED, TIMEOUT = "ok", "rejected", "timeout"  # rejected: queue full; timeout: queue timeout expired


@dataclass
class SimRequest:
    index: int
    sent: float
    priority: int = 0
    tokens: int = 32
    timeout_us: int | None = None
    client: int = -1  # closed loop: the client that sends the next request on the answer
    done: float = math.nan
    outcome: str = ""
    enqueued: float = 0.0  # at the current step
    queue_ms: dict = field(default_factory=dict)  # step -> time waited in its queue
    deadline: float = math.inf


@dataclass
class Execution:
    step: str
    started: float
    rows: int
    lengths: tuple[int, ...]
    ended: float = math.nan  # when its instance finished executing it (before the release gap)


@dataclass
class _Step:
    name: str
    spec: BatcherSpec
    queues: dict[int, deque] = field(default_factory=dict)
    delayed: dict[int, deque] = field(default_factory=dict)
    free: int = 0
    release_windows: list[tuple[float, float]] = field(default_factory=list)  # (response, release) per running instance
    stalled_until: float | None = None  # Triton 2.51's stall: the batcher sleeps until then or a wake
    idle_since: float = 0.0  # when the batcher last went to wait: the stall's idle wait counts from there
    wake_at: float = math.inf
    min_deadline: float = math.inf

    def __post_init__(self) -> None:
        self.queues = {level: deque() for level in self.spec.levels}
        self.delayed = {level: deque() for level in self.spec.levels}
        self.free = self.spec.instances

    def queued(self) -> int:
        return sum(len(q) for q in self.queues.values()) + sum(len(q) for q in self.delayed.values())

    def ordered(self):
        for level in self.spec.levels:
            yield from self.queues[level]
            yield from self.delayed[level]


class Simulation:
    """One run: `steps` in pipeline order (e.g. tokenizer then encoder), each with its spec."""

    def __init__(
        self, cost: CostModel, steps: list[tuple[str, BatcherSpec]], seed: int = 0, stall: bool | None = None, cache_hit_rate: float = 0.0
    ) -> None:
        self.cost = cost
        self.steps = [_Step(name, spec) for name, spec in steps]
        self.rng = np.random.default_rng(seed)
        self.stall = stall  # None: on for steps with priority queues (Triton 2.51)
        self.cache_hit_rate = cache_hit_rate
        self.events: list = []
        self.sequence = 0
        self.executions: list[Execution] = []
        self.on_done = None  # callback(request, now) for closed-loop clients
        self.now = 0.0
        self.client_free_at = 0.0
        self.table_cache: dict[tuple[str, int, int, int], float] = {}

    # -- events -------------------------------------------------------------------------
    def push(self, time: float, action, *args) -> None:
        self.sequence += 1
        heapq.heappush(self.events, (time, self.sequence, action, args))

    def run(self) -> None:
        while self.events:
            time, _, action, args = heapq.heappop(self.events)
            self.now = time
            action(time, *args)

    # -- request path -------------------------------------------------------------------
    def arrive(self, now: float, request: SimRequest) -> None:
        if self.cache_hit_rate and self.rng.random() < self.cache_hit_rate:
            self.push(now + self.cost.overheads.cache_hit_ms, self.finish, request, OK)
            return
        self.push(now + self.cost.overheads.frontend_ms, self.enqueue, 0, request)

    def finish(self, now: float, request: SimRequest, outcome: str) -> None:
        """The answer reaches the client. The load generator is one event loop: it takes
        each answer in turn and spends `client_ms` on it before that client sends again,
        which spreads closed-loop clients out (on a 2-core machine, noticeably)."""
        client_ms = self.cost.overheads.client_ms
        if client_ms and request.client >= 0:
            picked = max(now, self.client_free_at)
            self.client_free_at = picked + client_ms
            request.done, request.outcome = picked, outcome
            if self.on_done:
                self.on_done(request, self.client_free_at)
            return
        request.done, request.outcome = now, outcome
        if self.on_done:
            self.on_done(request, now)

    def fail(self, now: float, request: SimRequest, outcome: str) -> None:
        self.push(now + self.cost.overheads.response_ms, self.finish, request, outcome)

    def enqueue(self, now: float, position: int, request: SimRequest) -> None:
        step = self.steps[position]
        spec = step.spec
        level = spec.level_of(request.priority)
        policy = spec.policy(level)
        if policy.max_queue_size and len(step.queues[level]) + len(step.delayed[level]) >= policy.max_queue_size:
            self.fail(now, request, REJECTED)
            return
        timeout = policy.timeout_us(request.timeout_us) if spec.dynamic else 0
        request.enqueued = now
        request.deadline = now + timeout / 1000.0 if timeout else math.inf
        step.min_deadline = min(step.min_deadline, request.deadline)
        step.queues[level].append(request)
        if step.stalled_until is not None:
            if step.free > 0:  # an arrival that finds a free instance wakes the sleeping batcher
                step.stalled_until = None
                self.schedule(now, position)
            return
        if step.free == 0:
            if self.stall_applies(step) and any(response <= now < release for response, release in step.release_windows):
                step.stalled_until = max(now, step.idle_since + self.cost.stall.idle_wait_ms)
                self.push(step.stalled_until, self.stall_ends, position, step.stalled_until)
            return
        self.schedule(now, position)

    def stall_applies(self, step: _Step) -> bool:
        """auto (None): where Triton 2.51 stalls, batchers with priority levels or queue
        policies; True: every dynamic batcher (a what-if); False: none."""
        if self.stall is None:
            return step.spec.priority_queues
        return self.stall and step.spec.dynamic

    def stall_ends(self, now: float, position: int, until: float) -> None:
        step = self.steps[position]
        if step.stalled_until == until:
            step.stalled_until = None
            self.schedule(now, position)

    def wake(self, now: float, position: int) -> None:
        step = self.steps[position]
        if step.wake_at == now:
            step.wake_at = math.inf
            self.schedule(now, position)

    # -- the batcher ----------------------------------------------------------------------
    def schedule(self, now: float, position: int) -> None:
        step = self.steps[position]
        while step.free > 0 and step.stalled_until is None:
            self.expire(now, step)
            if not step.queued():
                step.idle_since = now
                return
            batch, wait_ms = self.form_batch(now, step)
            if batch:
                self.start(now, position, batch)
                if step.free == 0:  # the batcher waits (up to its idle wait) from here
                    step.idle_since = now
                continue
            if wait_ms is not None and now + wait_ms < step.wake_at:
                step.wake_at = now + wait_ms
                self.push(step.wake_at, self.wake, position)
            return

    def expire(self, now: float, step: _Step) -> None:
        """Queue timeouts, applied when the batcher looks at the queue: REJECT answers the
        request with an error, DELAY moves it behind the level's other requests."""
        if now < step.min_deadline:
            return
        step.min_deadline = math.inf
        for level, queue in step.queues.items():
            kept = deque()
            for request in queue:
                if request.deadline <= now:
                    if step.spec.policy(level).timeout_action == DELAY:
                        request.deadline = math.inf
                        step.delayed[level].append(request)
                    else:
                        self.fail(now, request, TIMEOUT)
                else:
                    kept.append(request)
                    step.min_deadline = min(step.min_deadline, request.deadline)
            step.queues[level] = kept

    def shape(self, step: _Step, request: SimRequest) -> int:
        """The batcher joins only equal shapes: token length for a non-ragged encoder."""
        return 0 if step.spec.ragged or step.name == "tokenizer" else request.tokens

    def form_batch(self, now: float, step: _Step) -> tuple[list[SimRequest], float | None]:
        spec = step.spec
        if not spec.dynamic:
            return [next(step.ordered())], None
        pending: list[SimRequest] = []
        best = 0
        send_now = False
        first_shape = None
        for request in step.ordered():
            if pending:
                if len(pending) + 1 > spec.max_preferred and best == 0:
                    best = len(pending)
                if len(pending) + 1 > spec.max_batch_size:
                    send_now = True
                    break
                if self.shape(step, request) != first_shape:
                    send_now = True
                    break
            else:
                first_shape = self.shape(step, request)
            pending.append(request)
            if len(pending) in spec.preferred:
                best = len(pending)
        oldest = min(r.enqueued for r in pending)
        delay_ms = spec.delay_us / 1000.0
        delay_exceeded = delay_ms > 0 and now - oldest >= delay_ms - 1e-9
        if best and not delay_exceeded:
            return pending[:best], None
        if send_now or len(pending) >= spec.max_preferred or delay_exceeded or delay_ms == 0:
            return pending, None
        wait = delay_ms - (now - oldest)
        if step.min_deadline < math.inf:
            wait = min(wait, max(0.0, step.min_deadline - now))
        return [], wait

    def start(self, now: float, position: int, batch: list[SimRequest]) -> None:
        step = self.steps[position]
        for request in batch:
            request.queue_ms[step.name] = now - request.enqueued
        remaining = len(batch)  # the batch is a prefix of the queues in priority order
        for level in step.spec.levels:
            for queue in (step.queues[level], step.delayed[level]):
                while remaining and queue:
                    queue.popleft()
                    remaining -= 1
        step.free -= 1
        lengths = tuple(r.tokens for r in batch)
        execution = Execution(step.name, now, len(batch), lengths)
        self.executions.append(execution)
        factor = self.cost.noise_factor(self.rng.random())
        if step.name == "encoder" and step.spec.ragged_split and len(batch) > 1:
            # Our backend runs the split shortest first and answers each request as soon as
            # its run is done; the instance is released after the last run.
            ordered = sorted(batch, key=lambda r: r.tokens)
            runs = split_runs([r.tokens for r in ordered], lambda rows, length: self.table_ms(step.name, rows, length, step.spec.instances))
            end = now
            for begin, stop, cost in runs:
                end += cost * factor
                self.push(end, self.respond, position, ordered[begin:stop])
            first = now + runs[0][2] * factor
        else:
            end = first = now + self.execution_ms(step, lengths) * factor
            self.push(end, self.respond, position, batch)
        execution.ended = end
        window = (first, end + self.cost.stall.release_gap_ms)
        step.release_windows.append(window)
        self.push(window[1], self.release, position, window)

    def table_ms(self, name: str, rows: int, length: int, instances: int) -> float:
        key = (name, rows, length, instances)
        if key not in self.table_cache:
            self.table_cache[key] = self.cost.execution_ms(name, rows, length, instances)
        return self.table_cache[key]

    def execution_ms(self, step: _Step, lengths: tuple[int, ...]) -> float:
        spec, name = step.spec, step.name
        if name == "tokenizer":
            base = self.table_ms(name, len(lengths), round(sum(lengths) / len(lengths)), spec.instances)
        elif spec.ragged_split and len(lengths) > 1:
            base = split_cost(sorted(lengths), lambda rows, length: self.table_ms(name, rows, length, spec.instances))
        else:
            base = self.table_ms(name, len(lengths), max(lengths), spec.instances)
        return base

    def respond(self, now: float, position: int, batch: list[SimRequest]) -> None:
        last = position == len(self.steps) - 1
        for request in batch:
            if last:
                self.push(now + self.cost.overheads.response_ms, self.finish, request, OK)
            else:
                self.push(now + self.cost.overheads.handoff_ms, self.enqueue, position + 1, request)

    def release(self, now: float, position: int, window: tuple[float, float]) -> None:
        step = self.steps[position]
        step.release_windows.remove(window)
        step.free += 1
        if step.stalled_until is None:
            self.schedule(now, position)


def split_runs(lengths: list[int], cost) -> list[tuple[int, int, float]]:
    """Cheapest split of a ragged execution (lengths sorted) into runs of consecutive
    lengths, each padded to its longest, as our backend's `ragged_split: cost` plans it:
    (begin, end, cost) per run, shortest first."""
    n = len(lengths)
    best = [0.0] + [math.inf] * n
    cut = [0] * (n + 1)
    for end in range(1, n + 1):
        for begin in range(end):
            candidate = best[begin] + cost(end - begin, lengths[end - 1])
            if candidate < best[end]:
                best[end], cut[end] = candidate, begin
    runs, end = [], n
    while end:
        begin = cut[end]
        runs.append((begin, end, best[end] - best[begin]))
        end = begin
    return runs[::-1]


def split_cost(lengths: list[int], cost) -> float:
    return sum(run[2] for run in split_runs(lengths, cost))
