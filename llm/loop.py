"""The engine loop: the one thread that plans, runs and samples every step.

Callers (the Triton model's `execute`, benchmarks) only `submit`, `cancel` and read
`snapshot`; everything else happens on the engine thread, so the scheduler stays
single-threaded and pure. Callbacks run on the engine thread: a slow callback slows every
stream, and one that raises ends only its own request. `run_one_step` is the step itself,
callable without the thread for deterministic tests.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from llm.contract import (
    GenerationRequest,
    LoopObserver,
    OutputCallback,
    RequestOutput,
    RequestTimings,
    SchedulerConfig,
    StepExecutor,
    StepStats,
)
from llm.output import Decoder, IncrementalDetokenizer, OutputState
from llm.sampling import Sampler, SamplingRow, make_generator
from llm.scheduler import Request, Scheduler, SchedulerOutput

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.05  # while requests are open but no step can run, how often cancellation is polled
WAITING_POLLS_PER_STEP = 8  # is_cancelled() calls per step for waiting requests, round robin
# A running request is asked at most this often: at 10 ms steps (one int4 stream) asking every step
# was 100 IPC round trips a second per stream, each CPU the step's two threads then lacked.
RUNNING_POLL_INTERVAL_S = 0.1


def adapters_of(seqs: Iterable[Request]) -> tuple[str, ...]:
    """The distinct LoRA adapters of `seqs`, sorted (the base model is none)."""
    return tuple(sorted({seq.request.params.lora_name for seq in seqs} - {None}))  # type: ignore[arg-type]


class QueueFullError(RuntimeError):
    """`max_waiting` requests already wait: the caller should reject this one (HTTP 503/429)."""


@dataclass
class _OpenRequest:
    seq: Request
    on_output: OutputCallback
    is_cancelled: Callable[[], bool] | None
    state: OutputState
    generator: torch.Generator | None
    pending_token_ids: list[int] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)


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
    ) -> None:
        self.executor = executor
        self.config = config
        self.scheduler = Scheduler(
            config, block_size=executor.block_size, num_blocks=executor.num_blocks, max_model_len=executor.max_model_len
        )
        self.sampler = Sampler(frozenset(executor.eos_token_ids))
        self._tokenizer = tokenizer
        self._observer = observer
        self._clock = clock
        self._cv = threading.Condition()
        self._inbox: deque[_Submission] = deque()
        self._cancels: set[str] = set()
        self._limits: SchedulerConfig | None = None  # step limits to apply before the next step
        self._open_ids: set[str] = set()  # submitted and not finished (guarded by _cv)
        self._open: dict[int, _OpenRequest] = {}  # engine thread only
        self._waiting_poll_cursor = 0  # engine thread only: where the next round of waiting polls starts
        self._running_polled_at: dict[int, float] = {}  # engine thread only: seq id -> when last asked while running
        self._next_seq_id = 0
        self._stopping = False
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._snapshot = self._take_snapshot()

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
                loop = cls(make_executor(), config, tokenizer, observer)
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
        self.scheduler.check_fits(len(request.prompt_token_ids), request.params.max_tokens)
        self._adapter_slot(request)
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

    def _adapter_slot(self, request: GenerationRequest) -> int:
        """The executor's slot of the request's LoRA adapter (-1: none); ValueError naming an unknown one."""
        name = request.params.lora_name
        if name is None:
            return -1
        slots = self.executor.adapter_slots
        if name not in slots:
            served = ", ".join(sorted(slots)) or "none"
            raise ValueError(f"unknown LoRA adapter {name!r} (lora_name); this model serves: {served}")
        return slots[name]

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
                    if self._stopping or self._inbox or self._cancels:
                        continue
                    self._cv.wait(self._idle_timeout())
        except Exception:
            log.exception("the engine loop failed")
        finally:
            self._finish_everything("the engine loop stopped")

    def _idle_timeout(self) -> float | None:
        wake = self.scheduler.next_step_time(self._clock())
        if wake is None:
            return IDLE_POLL_S if self._open else None
        return min(IDLE_POLL_S, max(wake - self._clock(), 0.0005))

    def run_one_step(self, now: float | None = None) -> bool:
        """Take in submissions and cancellations, then plan, run and sample one step.
        Returns whether a step ran."""
        self._take_in()
        self._poll_cancellations()
        now = self._clock() if now is None else now
        self._expire(now)
        scheduled = self.scheduler.schedule(now)
        self._publish()  # submit() bounds the waiting queue by this count while the step runs
        if scheduled.empty:
            return False
        started = self._clock()
        try:
            tokens = self._execute(scheduled)
        except Exception as exc:
            log.exception("a step failed; its %d sequences end with an error", len(scheduled.seqs))
            for seq in scheduled.seqs:
                if seq.seq_id in self._open:
                    self._finish(self._open[seq.seq_id], "error", error=f"the engine failed: {exc}")
            self._publish()
            return True
        duration = self._clock() - started
        self._report_step(scheduled, started, duration)
        finished_at = started + duration
        for seq, token in zip(scheduled.sampled_seqs, tokens):
            self._deliver(self._open[seq.seq_id], token, finished_at)
        self._publish()
        return True

    def _execute(self, scheduled: SchedulerOutput) -> list[int]:
        logits = self.executor.execute(scheduled.chunks)
        sampled_seqs = scheduled.sampled_seqs
        rows = [SamplingRow(seq.request.params, len(seq.output_token_ids), self._open[seq.seq_id].generator) for seq in sampled_seqs]
        tokens = self.sampler.sample(logits, rows)
        self.scheduler.commit(scheduled, {seq.seq_id: token for seq, token in zip(sampled_seqs, tokens)})
        return tokens

    def _take_in(self) -> None:
        with self._cv:
            submissions = list(self._inbox)
            self._inbox.clear()
            cancels = set(self._cancels)
            self._cancels.clear()
            limits, self._limits = self._limits, None
        if limits is not None:
            self.scheduler.set_step_limits(**{name: getattr(limits, name) for name in Scheduler.LIVE_KNOBS})
        for submission in submissions:
            seq = Request.from_request(self._next_seq_id, submission.request, self._adapter_slot(submission.request))
            self._next_seq_id += 1
            params = submission.request.params
            state = OutputState(
                params,
                frozenset(self.executor.eos_token_ids),
                IncrementalDetokenizer(self._tokenizer, submission.request.prompt_token_ids),
            )
            self._open[seq.seq_id] = _OpenRequest(seq, submission.on_output, submission.is_cancelled, state, make_generator(params))
            self.scheduler.add(seq)
        if cancels:
            for request in [r for r in self._open.values() if r.seq.request_id in cancels]:
                self._finish(request, "abort")

    def _poll_cancellations(self) -> None:
        """Ask every running request (at most every RUNNING_POLL_INTERVAL_S), the waiting ones
        next in line for a free slot, and `WAITING_POLLS_PER_STEP` other waiting ones in turn,
        whether its client went away. In Triton each `is_cancelled` is a round trip to the server
        process; asking all of hundreds of waiting requests every step is what a flood of streams
        turned into a stream of IPC calls that crashed the Python backend. A running request holds
        blocks and a batch slot, so it is asked on its first step and then every interval (at
        ~100 ms steps, every step or two); one next in line is asked before it is admitted, so a
        client that left costs no prefill (a flood whose clients all leave is retired in a step
        or two, not by prefilling each of them); the rest cost nothing while they wait."""
        now = self._clock()
        polled_at = self._running_polled_at
        for seq in list(self.scheduler.running):
            if now - polled_at.get(seq.seq_id, float("-inf")) >= RUNNING_POLL_INTERVAL_S:
                polled_at[seq.seq_id] = now
                self._ask_if_cancelled(self._open[seq.seq_id])
        asked: set[int] = set()
        free_slots = self.scheduler.max_batch - len(self.scheduler.running)
        for seq in list(self.scheduler.waiting):
            if free_slots <= 0:
                break
            request = self._open[seq.seq_id]
            if request.is_cancelled is not None:
                asked.add(seq.seq_id)
                if self._ask_if_cancelled(request):
                    continue
            free_slots -= 1
        skip = asked | {seq.seq_id for seq in self.scheduler.running}
        waiting = [request for request in self._open.values() if request.is_cancelled is not None and request.seq.seq_id not in skip]
        if waiting:
            start = self._waiting_poll_cursor % len(waiting)
            count = min(WAITING_POLLS_PER_STEP, len(waiting))
            for request in [waiting[(start + i) % len(waiting)] for i in range(count)]:
                self._ask_if_cancelled(request)
            self._waiting_poll_cursor = start + count

    def _ask_if_cancelled(self, request: _OpenRequest) -> bool:
        """Retire `request` if its client went away; returns whether it was retired."""
        if request.is_cancelled is None:
            return False
        try:
            cancelled = request.is_cancelled()
        except Exception as exc:
            self._finish(request, "error", error=f"is_cancelled failed: {exc}")
            return True
        if cancelled:
            self._finish(request, "abort")
        return cancelled

    def _expire(self, now: float) -> None:
        """Fail the requests that waited past their `queue_timeout_ms` without being scheduled."""
        for seq in self.scheduler.expire(now):
            waited_ms = (now - seq.request.arrival_time) * 1000.0
            error = (
                f"queue timeout: not scheduled within queue_timeout_ms={seq.request.params.queue_timeout_ms:g} (waited {waited_ms:.0f} ms)"
            )
            self._finish(self._open[seq.seq_id], "timeout", error=error)

    def _deliver(self, request: _OpenRequest, token: int, at: float) -> None:
        request.pending_token_ids.append(token)
        request.token_times.append(at)
        result = request.state.add_token(token)
        if result.finish_reason is not None:
            self._finish(request, result.finish_reason, new_text=result.new_text)
        elif result.new_text:
            output = self._output(request, result.new_text, finished=False)
            if not self._send(request, output):
                self._finish(request, "error", error="the output callback failed")

    def _finish(self, request: _OpenRequest, reason: str, *, new_text: str = "", error: str | None = None) -> None:
        """Retire a request in this step (slot and blocks freed) and send its one finished output."""
        self.scheduler.finish(request.seq)
        del self._open[request.seq.seq_id]
        self._running_polled_at.pop(request.seq.seq_id, None)
        with self._cv:
            self._open_ids.discard(request.seq.request_id)
        self._send(request, self._output(request, new_text, finished=True, reason=reason, error=error))
        self._report_finished(request, reason)

    def _output(
        self, request: _OpenRequest, new_text: str, *, finished: bool, reason: str | None = None, error: str | None = None
    ) -> RequestOutput:
        new_ids, request.pending_token_ids = request.pending_token_ids, []
        return RequestOutput(
            request_id=request.seq.request_id,
            new_text=new_text,
            new_token_ids=tuple(new_ids),
            finished=finished,
            finish_reason=reason,
            num_prompt_tokens=request.seq.num_prompt_tokens,
            num_output_tokens=request.state.num_output_tokens,
            error=error,
        )

    def _send(self, request: _OpenRequest, output: RequestOutput) -> bool:
        try:
            request.on_output(output)
        except Exception:
            log.exception("the output callback of request %r failed", request.seq.request_id)
            return False
        return True

    def _finish_everything(self, error: str) -> None:
        with self._cv:
            self._stopping = True
            submissions = list(self._inbox)
            self._inbox.clear()
        for submission in submissions:
            seq = Request.from_request(self._next_seq_id, submission.request)
            self._next_seq_id += 1
            state = OutputState(submission.request.params, frozenset(), IncrementalDetokenizer(self._tokenizer, ()))
            self._open[seq.seq_id] = _OpenRequest(seq, submission.on_output, submission.is_cancelled, state, None)
        for request in list(self._open.values()):
            self._finish(request, "error", error=error)
        self._publish()

    # -- reporting ---------------------------------------------------------------------------

    def _take_snapshot(self) -> dict:
        return {
            "running": len(self.scheduler.running),
            "waiting": len(self.scheduler.waiting),
            "kv_blocks_used": self.scheduler.blocks.num_used,
            "kv_blocks_total": self.scheduler.blocks.num_blocks,
        }

    def _publish(self) -> None:
        snapshot = self._take_snapshot()
        with self._cv:
            self._snapshot = snapshot

    def _report_step(self, scheduled: SchedulerOutput, started: float, duration: float) -> None:
        if self._observer is None:
            return
        blocks = self.scheduler.blocks
        stats = StepStats(
            started=started,
            duration_s=duration,
            prefill_tokens=scheduled.prefill_tokens,
            decode_seqs=scheduled.decode_seqs,
            kv_tokens_attended=scheduled.kv_tokens_attended,
            running=len(self.scheduler.running),
            waiting=len(self.scheduler.waiting),
            kv_blocks_used=blocks.num_used,
            kv_blocks_total=blocks.num_blocks,
            preemptions=len(scheduled.preempted),
            prefix_cache_queries=scheduled.prefix_cache_queries,
            prefix_cache_hits=scheduled.prefix_cache_hits,
            running_adapters=adapters_of(self.scheduler.running),
            waiting_adapters=adapters_of(self.scheduler.waiting),
            max_loras=self.config.max_loras,
        )
        try:
            self._observer.on_step(stats)
        except Exception:
            log.exception("the loop observer failed on a step")

    def _report_finished(self, request: _OpenRequest, reason: str) -> None:
        if self._observer is None:
            return
        arrival = request.seq.request.arrival_time
        times = request.token_times
        scheduled = request.seq.first_scheduled
        timings = RequestTimings(
            request_id=request.seq.request_id,
            queue_s=None if scheduled is None else scheduled - arrival,
            ttft_s=times[0] - arrival if times else None,
            e2e_s=self._clock() - arrival,
            inter_token_s=tuple(b - a for a, b in itertools.pairwise(times)),
            prompt_tokens=request.seq.num_prompt_tokens,
            output_tokens=request.state.num_output_tokens,
            finish_reason=reason,
            lora_name=request.seq.request.params.lora_name,
        )
        try:
            self._observer.on_finished(timings)
        except Exception:
            log.exception("the loop observer failed on a finished request")
