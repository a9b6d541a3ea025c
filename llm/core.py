"""The engine core: one step of the engine, single-threaded and pure (vLLM's `EngineCore`).

Given the scheduler's config, an executor (anything with the StepExecutor protocol) and a
clock, it takes requests in (`add_request`), retires them (`abort`), and runs a step
(`step`, or its halves `expire`, `schedule` and `execute`), returning the RequestOutputs the
step produced. It owns what a step means: intake order and sequence ids, queue timeouts,
the sampling rows, turning sampled tokens into text and finish reasons, and the step's and
each finished request's figures for the observer. It has no threads, locks or sleeps, so a
test or a simulator drives it on its own clock; EngineLoop (llm/loop.py) runs it on the
engine thread and delivers its outputs.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch

from llm.contract import (
    GenerationRequest,
    LoopObserver,
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


def adapters_of(seqs: Iterable[Request]) -> tuple[str, ...]:
    """The distinct LoRA adapters of `seqs`, sorted (the base model is none)."""
    return tuple(sorted({seq.request.params.lora_name for seq in seqs} - {None}))  # type: ignore[arg-type]


@dataclass
class _OpenRequest:
    """A request taken in and not yet finished: its sequence and what its outputs need."""

    seq: Request
    state: OutputState
    generator: torch.Generator | None
    pending_token_ids: list[int] = field(default_factory=list)  # sampled, not yet in an output (text held back)
    token_times: list[float] = field(default_factory=list)


class EngineCore:
    def __init__(
        self,
        executor: StepExecutor,
        config: SchedulerConfig,
        tokenizer: Decoder,
        observer: LoopObserver | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        scheduler: Scheduler | None = None,
    ) -> None:
        """`scheduler`: one built from `config` and the executor's facts unless given (the step
        simulator gives another policy's, tools/simulate/llm/vllm_policy.py)."""
        self.executor = executor
        self.config = config
        self.scheduler = scheduler or Scheduler(
            config, block_size=executor.block_size, num_blocks=executor.num_blocks, max_model_len=executor.max_model_len
        )
        self.sampler = Sampler(frozenset(executor.eos_token_ids))
        self._tokenizer = tokenizer
        self._observer = observer
        self._clock = clock
        self._open: dict[int, _OpenRequest] = {}  # seq id -> request, in intake order
        self._seq_ids: dict[str, int] = {}  # request id -> seq id of the open requests
        self._next_seq_id = 0

    # -- intake and retirement ---------------------------------------------------------------

    def check_request(self, request: GenerationRequest) -> None:
        """Raise ValueError for a request that could never run (the context window, the KV
        cache, an unknown LoRA adapter). Reads only what does not change after construction,
        so a caller may check on its own thread before queueing."""
        self.scheduler.check_fits(len(request.prompt_token_ids), request.params.max_tokens)
        self.adapter_slot(request)

    def adapter_slot(self, request: GenerationRequest) -> int:
        """The executor's slot of the request's LoRA adapter (-1: none); ValueError naming an unknown one."""
        name = request.params.lora_name
        if name is None:
            return -1
        slots = self.executor.adapter_slots
        if name not in slots:
            served = ", ".join(sorted(slots)) or "none"
            raise ValueError(f"unknown LoRA adapter {name!r} (lora_name); this model serves: {served}")
        return slots[name]

    def add_request(self, request: GenerationRequest) -> None:
        """Hand a request to the scheduler; it is planned from the next `schedule` on."""
        seq = Request.from_request(self._next_seq_id, request, self.adapter_slot(request))
        self._next_seq_id += 1
        params = request.params
        state = OutputState(
            params, frozenset(self.executor.eos_token_ids), IncrementalDetokenizer(self._tokenizer, request.prompt_token_ids)
        )
        self._admit(_OpenRequest(seq, state, make_generator(params)))
        self.scheduler.add(seq)

    def abort(self, request_id: str, reason: str = "abort", error: str | None = None) -> RequestOutput | None:
        """Retire an open request now (slot and blocks freed) with `reason`; returns its one
        finished output, or None when no such request is open."""
        seq_id = self._seq_ids.get(request_id)
        if seq_id is None:
            return None
        return self._finish(self._open[seq_id], reason, error=error)

    def abort_all(self, error: str, never_taken_in: Sequence[GenerationRequest] = ()) -> list[RequestOutput]:
        """End every open request, and `never_taken_in` (queued by a caller but not added),
        with an error output each: what a stopping engine owes every request it accepted."""
        for request in never_taken_in:
            seq = Request.from_request(self._next_seq_id, request)
            self._next_seq_id += 1
            state = OutputState(request.params, frozenset(), IncrementalDetokenizer(self._tokenizer, ()))
            self._admit(_OpenRequest(seq, state, None))
        return [self._finish(request, "error", error=error) for request in list(self._open.values())]

    def open_request_ids(self) -> list[str]:
        """The open requests' ids, in intake order."""
        return [request.seq.request_id for request in self._open.values()]

    def has_open_requests(self) -> bool:
        return bool(self._open)

    def set_step_limits(self, config: SchedulerConfig) -> None:
        """Apply `config`'s live knobs (Scheduler.LIVE_KNOBS) from the next step on."""
        self.scheduler.set_step_limits(**{name: getattr(config, name) for name in Scheduler.LIVE_KNOBS})
        self.config = config

    # -- the step ----------------------------------------------------------------------------

    def step(self, now: float | None = None) -> list[RequestOutput]:
        """Expire, plan, run and sample one step; the outputs of the requests it touched (none
        when no step could run: see `schedule` for telling the two apart)."""
        now = self._clock() if now is None else now
        outputs = self.expire(now)
        scheduled = self.schedule(now)
        if not scheduled.empty:
            outputs += self.execute(scheduled)
        return outputs

    def expire(self, now: float) -> list[RequestOutput]:
        """Fail the requests that waited past their `queue_timeout_ms` without being scheduled."""
        outputs = []
        for seq in self.scheduler.expire(now):
            waited_ms = (now - seq.request.arrival_time) * 1000.0
            error = (
                f"queue timeout: not scheduled within queue_timeout_ms={seq.request.params.queue_timeout_ms:g} (waited {waited_ms:.0f} ms)"
            )
            outputs.append(self._finish(self._open[seq.seq_id], "timeout", error=error))
        return outputs

    def schedule(self, now: float) -> SchedulerOutput:
        """Plan the next step (empty: nothing can run now). Apart from `execute` so a caller
        can publish the queue's new state before the step's forward, which takes long."""
        return self.scheduler.schedule(now)

    def execute(self, scheduled: SchedulerOutput) -> list[RequestOutput]:
        """Run the planned step, sample, commit, and turn each sampled token into output. A
        failed forward ends only the step's own requests, each with an error output."""
        started = self._clock()
        try:
            tokens = self._run(scheduled)
        except Exception as exc:
            log.exception("a step failed; its %d sequences end with an error", len(scheduled.seqs))
            return [
                self._finish(self._open[seq.seq_id], "error", error=f"the engine failed: {exc}")
                for seq in scheduled.seqs
                if seq.seq_id in self._open
            ]
        duration = self._clock() - started
        self._report_step(scheduled, started, duration)
        finished_at = started + duration
        outputs = []
        for seq, token in zip(scheduled.sampled_seqs, tokens):
            output = self._add_token(self._open[seq.seq_id], token, finished_at)
            if output is not None:
                outputs.append(output)
        return outputs

    def snapshot(self) -> dict:
        """running, waiting, kv_blocks_used, kv_blocks_total: the queue and cache as of now."""
        return {
            "running": len(self.scheduler.running),
            "waiting": len(self.scheduler.waiting),
            "kv_blocks_used": self.scheduler.blocks.num_used,
            "kv_blocks_total": self.scheduler.blocks.num_blocks,
        }

    def _run(self, scheduled: SchedulerOutput) -> list[int]:
        logits = self.executor.execute(scheduled.chunks)
        sampled_seqs = scheduled.sampled_seqs
        rows = [SamplingRow(seq.request.params, len(seq.output_token_ids), self._open[seq.seq_id].generator) for seq in sampled_seqs]
        tokens = self.sampler.sample(logits, rows)
        self.scheduler.commit(scheduled, {seq.seq_id: token for seq, token in zip(sampled_seqs, tokens)})
        return tokens

    def _add_token(self, request: _OpenRequest, token: int, at: float) -> RequestOutput | None:
        """The output `token` makes: finished, new text, or none while text is held back."""
        request.pending_token_ids.append(token)
        request.token_times.append(at)
        result = request.state.add_token(token)
        if result.finish_reason is not None:
            return self._finish(request, result.finish_reason, new_text=result.new_text)
        if result.new_text:
            return self._output(request, result.new_text, finished=False)
        return None

    def _admit(self, request: _OpenRequest) -> None:
        self._open[request.seq.seq_id] = request
        self._seq_ids[request.seq.request_id] = request.seq.seq_id

    def _finish(self, request: _OpenRequest, reason: str, *, new_text: str = "", error: str | None = None) -> RequestOutput:
        """Retire a request in this step (slot and blocks freed) and make its one finished output."""
        self.scheduler.finish(request.seq)
        del self._open[request.seq.seq_id]
        if self._seq_ids.get(request.seq.request_id) == request.seq.seq_id:
            del self._seq_ids[request.seq.request_id]
        output = self._output(request, new_text, finished=True, reason=reason, error=error)
        self._report_finished(request, reason)
        return output

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

    # -- reporting ---------------------------------------------------------------------------

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
