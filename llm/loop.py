"""The engine loop: the one thread that runs every step of the engine core.

Callers (the Triton model's `execute`, benchmarks) only `submit`, `cancel` and read
`snapshot`; everything else happens on the engine thread, so the core and its scheduler stay
single-threaded and pure. What a step does is EngineCore's (llm/core.py); this module owns
the thread, the inbox, waking up, asking clients whether they left, and delivering each
output to its request's callback. Given `ask_off_thread` (the Triton model passes its sending
thread), the routine questions whether a client left are asked there, not on the engine thread:
in Triton each is an IPC round trip the engine thread otherwise sat through between steps.
Callbacks run on the engine thread: a slow callback slows every stream, and one that raises
ends only its own request. `run_one_step` is the step
itself, callable without the thread for deterministic tests.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from llm.contract import (
    GenerationRequest,
    LoopObserver,
    OutputCallback,
    RequestOutput,
    SchedulerConfig,
    StepExecutor,
)
from llm.core import EngineCore
from llm.output import Decoder
from llm.scheduler import Scheduler

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.05  # while requests are open but no step can run, how often cancellation is polled
WAITING_POLLS_PER_STEP = 8  # is_cancelled() calls per step for waiting requests, round robin
# A running request is asked at most this often: at 10 ms steps (one int4 stream) asking every step
# was 100 IPC round trips a second per stream, each CPU the step's two threads then lacked.
RUNNING_POLL_INTERVAL_S = 0.1


class QueueFullError(RuntimeError):
    """`max_waiting` requests already wait: the caller should reject this one (HTTP 503/429)."""


@dataclass
class _Client:
    """Where an open request's outputs go, and how to ask whether its client left."""

    on_output: OutputCallback
    is_cancelled: Callable[[], bool] | None


@dataclass
class _Submission:
    request: GenerationRequest
    on_output: OutputCallback
    is_cancelled: Callable[[], bool] | None


class EngineLoop:
    def __init__(
        self,
        executor: StepExecutor,
        config: SchedulerConfig,
        tokenizer: Decoder,
        observer: LoopObserver | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        ask_off_thread: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        self.core = EngineCore(executor, config, tokenizer, observer, clock=clock)
        self.executor = executor
        self.config = config
        self.scheduler = self.core.scheduler
        self._clock = clock
        self._cv = threading.Condition()
        self._inbox: deque[_Submission] = deque()
        self._cancels: set[str] = set()
        self._poll_errors: dict[str, str] = {}  # request id -> why asking its client failed (off-thread asks)
        self._ask_off_thread = ask_off_thread
        self._asking = threading.Event()  # set while a round of off-thread asks has not finished
        self._limits: SchedulerConfig | None = None  # step limits to apply before the next step
        self._open_ids: set[str] = set()  # submitted and not finished (guarded by _cv)
        self._clients: dict[str, _Client] = {}  # engine thread only: the core's open requests, in intake order
        self._waiting_poll_cursor = 0  # engine thread only: where the next round of waiting polls starts
        self._running_polled_at: dict[str, float] = {}  # engine thread only: request id -> when last asked while running
        self._stopping = False
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._snapshot = self.core.snapshot()

    # -- the callers' side (any thread) -----------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the engine loop is already started")
        self._thread = threading.Thread(target=self._run, name="llm-engine-loop", daemon=True)
        self._thread.start()

    @classmethod
    def launch(
        cls,
        make_executor: Callable[[], StepExecutor],
        config: SchedulerConfig,
        tokenizer: Decoder,
        observer: LoopObserver | None = None,
        ask_off_thread: Callable[[Callable[[], None]], None] | None = None,
    ) -> EngineLoop:
        """Build the executor on a new thread and run the loop on that same thread; returns the
        started loop, or raises what the build raised.

        torch's CPU ops run in an OpenMP team per calling thread. Loading the weights on one
        thread and stepping on another leaves two teams, more OpenMP threads than cores, and
        libgomp then stops its workers spinning between parallel regions: every one of a
        step's ~900 small regions pays a wake-up. One int4 decode step took 1.6x as long on
        the loop's thread as on the thread that had loaded it (docs/decisions/llm-one-torch-thread.md)."""
        built: queue.Queue[EngineLoop | BaseException] = queue.Queue(maxsize=1)

        def engine_thread() -> None:
            try:
                loop = cls(make_executor(), config, tokenizer, observer, ask_off_thread=ask_off_thread)
            except BaseException as error:  # handed to the caller, which re-raises it
                built.put(error)
                return
            loop._thread = threading.current_thread()
            built.put(loop)
            loop._run()

        threading.Thread(target=engine_thread, name="llm-engine-loop", daemon=True).start()
        result = built.get()
        if isinstance(result, BaseException):
            raise result
        return result

    def submit(self, request: GenerationRequest, on_output: OutputCallback, is_cancelled: Callable[[], bool] | None = None) -> None:
        """Queue a request; raises QueueFullError at `max_waiting`, ValueError when it cannot fit."""
        self.core.check_request(request)
        with self._cv:
            if self._stopping:
                raise RuntimeError("the engine loop is stopped")
            if request.request_id in self._open_ids:
                raise ValueError(f"request id {request.request_id!r} is already in flight")
            if len(self._inbox) + self._snapshot["waiting"] >= self.config.max_waiting:
                raise QueueFullError(f"{self.config.max_waiting} requests are already waiting (max_waiting)")
            self._open_ids.add(request.request_id)
            self._inbox.append(_Submission(request, on_output, is_cancelled))
            self._cv.notify()

    def cancel(self, request_id: str) -> None:
        """Abort a request within a step: its blocks are freed, it gets finish_reason "abort"."""
        with self._cv:
            self._cancels.add(request_id)
            self._cv.notify()

    def update_config(self, **changes: float) -> SchedulerConfig:
        """Change max_num_batched_tokens and/or max_wait_ms from the next step on, without a
        reload: open streams keep running. Raises ValueError for another knob or a bad value."""
        with self._cv:
            config = Scheduler.with_step_limits(self._limits or self.config, **changes)
            self._limits = self.config = config
            self._cv.notify()
        return config

    def snapshot(self) -> dict:
        """running, waiting, kv_blocks_used, kv_blocks_total, as of the last step (for gauges)."""
        with self._cv:
            return dict(self._snapshot)

    def stop(self, timeout_s: float = 10.0) -> None:
        """End every open request with an error output and join the engine thread."""
        with self._cv:
            self._stopping = True
            self._cv.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.error("the engine loop did not stop within %.1f s", timeout_s)
            return
        self._finish_everything("the engine loop stopped")

    # -- the engine thread -------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._cv:
                    if self._stopping:
                        break
                if self.run_one_step():
                    continue
                with self._cv:
                    if self._stopping or self._inbox or self._cancels or self._poll_errors:
                        continue
                    self._cv.wait(self._idle_timeout())
        except Exception:
            log.exception("the engine loop failed")
        finally:
            self._finish_everything("the engine loop stopped")

    def _idle_timeout(self) -> float | None:
        wake = self.scheduler.next_step_time(self._clock())
        if wake is None:
            return IDLE_POLL_S if self._clients else None
        return min(IDLE_POLL_S, max(wake - self._clock(), 0.0005))

    def run_one_step(self, now: float | None = None) -> bool:
        """Take in submissions and cancellations, ask clients whether they left, then let the
        core plan, run and sample one step and deliver its outputs. Returns whether a step ran."""
        self._take_in()
        self._poll_cancellations()
        now = self._clock() if now is None else now
        self._deliver(self.core.expire(now))
        scheduled = self.core.schedule(now)
        self._publish()  # submit() bounds the waiting queue by this count while the step runs
        if scheduled.empty:
            return False
        self._deliver(self.core.execute(scheduled))
        self._publish()
        return True

    def _take_in(self) -> None:
        with self._cv:
            submissions = list(self._inbox)
            self._inbox.clear()
            cancels = set(self._cancels)
            self._cancels.clear()
            poll_errors, self._poll_errors = self._poll_errors, {}
            limits, self._limits = self._limits, None
        if limits is not None:
            self.core.set_step_limits(limits)
        for submission in submissions:
            self._clients[submission.request.request_id] = _Client(submission.on_output, submission.is_cancelled)
            self.core.add_request(submission.request)
        if cancels:
            for request_id in [request_id for request_id in self._clients if request_id in cancels]:
                self._deliver([self.core.abort(request_id)])
        for request_id, error in poll_errors.items():
            if request_id in self._clients:
                self._deliver([self.core.abort(request_id, "error", error=error)])

    def _poll_cancellations(self) -> None:
        """Ask every running request (at most every RUNNING_POLL_INTERVAL_S), the waiting ones
        next in line for a free slot, and `WAITING_POLLS_PER_STEP` other waiting ones in turn,
        whether its client went away. In Triton each `is_cancelled` is a round trip to the server
        process; asking all of hundreds of waiting requests every step is what a flood of streams
        turned into a stream of IPC calls that crashed the Python backend. A running request holds
        blocks and a batch slot, so it is asked on its first step and then every interval (at
        ~100 ms steps, every step or two); one next in line is asked before it is admitted, here
        on the engine thread, so a client that left costs no prefill (a flood whose clients all
        leave is retired in a step or two, not by prefilling each of them); the rest cost nothing
        while they wait. With `ask_off_thread` the running and in-turn questions go there and an
        answer ends its request at the next step; while a round is still being asked no new one
        starts, so the questions never queue up behind slow answers."""
        now = self._clock()
        off_thread = self._ask_off_thread is not None
        routine = not (off_thread and self._asking.is_set())
        asks: list[str] = []  # the routine questions of this step, for the other thread
        polled_at = self._running_polled_at
        for seq in list(self.scheduler.running) if routine else ():
            if now - polled_at.get(seq.request_id, float("-inf")) >= RUNNING_POLL_INTERVAL_S:
                polled_at[seq.request_id] = now
                if off_thread:
                    asks.append(seq.request_id)
                else:
                    self._ask_if_cancelled(seq.request_id)  # an answer frees its slot for the next in line
        asked: set[str] = set()
        free_slots = self.scheduler.max_batch - len(self.scheduler.running)
        for seq in list(self.scheduler.waiting):
            if free_slots <= 0:
                break
            if self._clients[seq.request_id].is_cancelled is not None:
                asked.add(seq.request_id)
                if self._ask_if_cancelled(seq.request_id):
                    continue
            free_slots -= 1
        if routine:
            skip = asked | {seq.request_id for seq in self.scheduler.running}
            waiting = [rid for rid, client in self._clients.items() if client.is_cancelled is not None and rid not in skip]
            if waiting:
                start = self._waiting_poll_cursor % len(waiting)
                count = min(WAITING_POLLS_PER_STEP, len(waiting))
                for request_id in [waiting[(start + i) % len(waiting)] for i in range(count)]:
                    if off_thread:
                        asks.append(request_id)
                    else:
                        self._ask_if_cancelled(request_id)
                self._waiting_poll_cursor = start + count
        questions = [(rid, client.is_cancelled) for rid in asks if (client := self._clients.get(rid)) and client.is_cancelled]
        if questions:
            self._asking.set()
            self._ask_off_thread(functools.partial(self._ask_round, questions))  # type: ignore[misc]

    def _ask_round(self, questions: list[tuple[str, Callable[[], bool]]]) -> None:
        """Off the engine thread: ask each client; one that left is cancelled, one whose question
        failed is ended with an error, both at the engine's next step."""
        try:
            for request_id, is_cancelled in questions:
                try:
                    if is_cancelled():
                        self.cancel(request_id)
                except Exception as exc:
                    with self._cv:
                        self._poll_errors[request_id] = f"is_cancelled failed: {exc}"
                        self._cv.notify()
        finally:
            self._asking.clear()

    def _ask_if_cancelled(self, request_id: str) -> bool:
        """Retire the request if its client went away; returns whether it was retired."""
        client = self._clients.get(request_id)
        if client is None or client.is_cancelled is None:
            return False
        try:
            cancelled = client.is_cancelled()
        except Exception as exc:
            self._deliver([self.core.abort(request_id, "error", error=f"is_cancelled failed: {exc}")])
            return True
        if cancelled:
            self._deliver([self.core.abort(request_id)])
        return cancelled

    def _deliver(self, outputs: Iterable[RequestOutput | None]) -> None:
        """Hand each output to its request's callback; a finished one closes the request first
        (so its id may be submitted again from the callback), and a callback that raises on a
        partial output ends its request with an error."""
        for output in outputs:
            if output is None:
                continue
            request_id = output.request_id
            client = self._clients.get(request_id)
            if client is None:  # never registered: nowhere to send it (a bug, logged rather than ending the loop)
                log.error("an output for request %r, which has no callback", request_id)
                continue
            if output.finished:
                del self._clients[request_id]
                self._running_polled_at.pop(request_id, None)
                with self._cv:
                    self._open_ids.discard(request_id)
                self._send(client, output)
            elif not self._send(client, output):
                self._deliver([self.core.abort(request_id, "error", error="the output callback failed")])

    def _send(self, client: _Client, output: RequestOutput) -> bool:
        try:
            client.on_output(output)
        except Exception:
            log.exception("the output callback of request %r failed", output.request_id)
            return False
        return True

    def _finish_everything(self, error: str) -> None:
        with self._cv:
            self._stopping = True
            submissions = list(self._inbox)
            self._inbox.clear()
        for submission in submissions:
            self._clients[submission.request.request_id] = _Client(submission.on_output, submission.is_cancelled)
        self._deliver(self.core.abort_all(error, [submission.request for submission in submissions]))
        self._publish()

    def _publish(self) -> None:
        snapshot = self.core.snapshot()
        with self._cv:
            self._snapshot = snapshot
