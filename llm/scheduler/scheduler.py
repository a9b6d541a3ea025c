"""The iteration scheduler: which tokens of which sequences run in the next step.

Pure Python with the time passed in (no threads, no sleeping), so the engine loop and a
step-level simulator drive the same code. Each step, as vLLM's v1 scheduler and
Sarathi-Serve: running decodes first (one token each), then continuing chunked prefills,
then new sequences from the waiting queue, inside a token budget and a sequence cap; a long
prompt runs in chunks so it never stalls the running streams for more than one chunk.

Modes share this code and differ only in who may be admitted:
- `iteration`: any waiting sequence, at every step (continuous batching, Orca);
- `request`: a batch gathered within `max_wait_ms` of its first arrival runs to completion
  before the next batch forms (request-level dynamic batching);
- `none`: a batch of one.

With prefix caching (`enable_prefix_caching`), a sequence admitted with an empty KV cache
first takes the cached blocks of its longest cached prefix (block_manager.py): its first
chunk starts after them, and only the uncached tokens count against the token budget.

A request with `queue_timeout_ms` that is still waiting, never scheduled, when its deadline
passes is handed back by `expire` for the loop to fail; a preempted one has been served and
does not expire.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from llm.contract import ScheduledChunk, SchedulerConfig, check_request_fits
from llm.scheduler.block_manager import BlockManager, chain_hashes
from llm.scheduler.queue import WaitingQueue, order_key
from llm.scheduler.request import Request, RequestStatus

MODES = ("iteration", "request", "none")


@dataclass(frozen=True)
class SchedulerOutput:
    """What the scheduler decided for one step (vLLM's name); the executor turns its chunks into
    the step's tensors (llm.engine.step_plan.StepPlan). `chunks[i]` feeds `seqs[i]` (a decode
    when `decodes[i]`); `preempted` lost their KV this step."""

    chunks: tuple[ScheduledChunk, ...]
    seqs: tuple[Request, ...]
    decodes: tuple[bool, ...] = ()
    preempted: tuple[Request, ...] = ()
    prefix_cache_queries: int = 0  # prompt tokens of the admitted sequences looked up in the cache
    prefix_cache_hits: int = 0  # of those, tokens found cached

    @property
    def empty(self) -> bool:
        return not self.chunks

    @property
    def num_tokens(self) -> int:
        return sum(len(chunk.token_ids) for chunk in self.chunks)

    @property
    def prefill_tokens(self) -> int:
        return sum(len(chunk.token_ids) for chunk, decode in zip(self.chunks, self.decodes) if not decode)

    @property
    def decode_seqs(self) -> int:
        return sum(self.decodes)

    @property
    def kv_tokens_attended(self) -> int:
        """Positions the step's attention reads: each chunk's context up to its last token."""
        return sum(chunk.start_position + len(chunk.token_ids) for chunk in self.chunks)

    @property
    def sampled_seqs(self) -> tuple[Request, ...]:
        """The sequences whose logits the executor returns, in its row order."""
        return tuple(seq for chunk, seq in zip(self.chunks, self.seqs) if chunk.sample)


@dataclass
class _Entry:
    seq: Request
    count: int  # tokens fed this step
    decode: bool
    queried: int = 0  # admitted this step: tokens looked up in the prefix cache
    hit: int = 0  # and found there


@dataclass(frozen=True)
class _Admission:
    """How a waiting sequence would enter this step: the cached blocks it takes, the tokens it feeds."""

    hit: list[int]
    cached_tokens: int
    count: int


class Scheduler:
    def __init__(self, config: SchedulerConfig, *, block_size: int, num_blocks: int, max_model_len: int) -> None:
        if config.mode not in MODES:
            raise ValueError(f"unknown scheduler mode {config.mode!r}; expected one of {', '.join(MODES)}")
        if config.max_num_seqs <= 0 or config.long_prefill_token_threshold <= 0 or config.max_wait_ms < 0:
            raise ValueError("max_num_seqs and long_prefill_token_threshold must be positive, max_wait_ms not negative")
        self._check_step_limits(config)
        self.config = config
        self.max_model_len = max_model_len
        self.blocks = BlockManager(num_blocks, block_size, prefix_caching=config.enable_prefix_caching)
        self.waiting = WaitingQueue(config.policy)
        self.running: list[Request] = []
        self._key = order_key(config.policy)
        self._batch: set[int] = set()  # request and none modes: the members of the batch in flight
        self.max_batch = 1 if config.mode == "none" else config.max_num_seqs

    LIVE_KNOBS = ("max_num_batched_tokens", "max_wait_ms")  # what set_step_limits may change

    def set_step_limits(self, **changes: float) -> SchedulerConfig:
        """Change the token budget and/or max-wait from the next `schedule` on (an adaptive
        controller's live channel); the running and waiting sequences keep their place."""
        self.config = self.with_step_limits(self.config, **changes)
        return self.config

    @classmethod
    def with_step_limits(cls, config: SchedulerConfig, **changes: float) -> SchedulerConfig:
        """`config` with new step limits, validated as the constructor validates them."""
        unknown = set(changes) - set(cls.LIVE_KNOBS)
        if unknown:
            raise ValueError(f"only {', '.join(cls.LIVE_KNOBS)} change live, not {', '.join(sorted(unknown))}")
        config = dataclasses.replace(config, **changes)
        cls._check_step_limits(config)
        return config

    @staticmethod
    def _check_step_limits(config: SchedulerConfig) -> None:
        if config.max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must not be negative, got {config.max_wait_ms:g}")
        if config.max_num_batched_tokens < config.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({config.max_num_batched_tokens}) must be at least max_num_seqs "
                f"({config.max_num_seqs}): every running sequence needs a token per step"
            )

    # -- requests in and out ------------------------------------------------------------

    def check_fits(self, num_prompt_tokens: int, max_tokens: int) -> None:
        """Raise ValueError (naming the limit) for a request that could never run here."""
        check_request_fits(num_prompt_tokens, max_tokens, self.max_model_len, self.blocks.num_blocks * self.blocks.block_size)

    def add(self, seq: Request) -> None:
        self.check_fits(seq.num_prompt_tokens, seq.request.params.max_tokens)
        seq.status = RequestStatus.WAITING
        self.waiting.add(seq)

    def finish(self, seq: Request) -> None:
        """Retire a sequence (finished or aborted): its slot and blocks are free for the next step."""
        if seq.status is RequestStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is RequestStatus.WAITING:
            self.waiting.remove(seq)
        self.blocks.release(seq.block_table)
        self._batch.discard(seq.seq_id)
        seq.status = RequestStatus.FINISHED

    def expire(self, now: float) -> list[Request]:
        """Waiting sequences never scheduled whose queue deadline has passed, taken out of the
        queue (their status stays WAITING until the caller finishes them)."""
        expired = [
            seq for seq in self.waiting if seq.first_scheduled is None and seq.queue_deadline is not None and seq.queue_deadline <= now
        ]
        for seq in expired:
            self.waiting.remove(seq)
        return expired

    @property
    def has_work(self) -> bool:
        return bool(self.running) or bool(self.waiting)

    # -- when to step ---------------------------------------------------------------------

    def next_step_time(self, now: float) -> float | None:
        """When the next step should run (<= now: at once), None when there is nothing to do.

        A step with running sequences never waits. With none running, new arrivals may wait up
        to `max_wait_ms` after the first of them for company, unless they already fill a step."""
        if self.running or (self._batch and self.config.mode != "iteration"):
            return now
        if not self.waiting:
            return None
        if self.config.mode == "none" or self._gather_is_full():
            return now
        first_arrival = min(seq.request.arrival_time for seq in self.waiting)
        return max(now, first_arrival + self.config.max_wait_ms / 1000.0) if self.config.max_wait_ms else now

    def _gather_is_full(self) -> bool:
        if len(self.waiting) >= self.max_batch:
            return True
        return self.config.mode == "iteration" and sum(s.num_uncomputed for s in self.waiting) >= self.config.max_num_batched_tokens

    # -- the step -------------------------------------------------------------------------

    def schedule(self, now: float) -> SchedulerOutput:
        ready = self.next_step_time(now)
        if ready is None or ready > now:
            return SchedulerOutput((), ())
        if self.config.mode != "iteration" and not self._batch:
            self._form_batch()
        plan: list[_Entry] = []
        preempted: list[Request] = []
        pending = sorted(self.running, key=lambda s: (not s.is_decoding, self._key(s)))
        unscheduled = set(id(s) for s in pending)
        for seq in pending:
            if seq.status is not RequestStatus.RUNNING:
                continue  # preempted earlier in this step
            budget = self._budget_left(plan)
            if budget == 0 or len(plan) >= self.config.max_num_seqs:
                break
            count = 1 if seq.is_decoding else min(seq.num_uncomputed, self.config.long_prefill_token_threshold, budget)
            while not self.blocks.can_grow(seq.block_table, seq.num_computed_tokens + count):
                victim = max((s for s in self.running if id(s) in unscheduled), key=self._key)
                self._preempt(victim)
                preempted.append(victim)
                if victim is seq:
                    break
            if seq.status is not RequestStatus.RUNNING:
                continue
            self.blocks.grow(seq.block_table, seq.num_computed_tokens + count)
            unscheduled.discard(id(seq))
            plan.append(_Entry(seq, count, seq.is_decoding))
        if not preempted:  # out of blocks for running sequences: admitting more would only thrash
            self._admit(plan, preempted, now)
        return SchedulerOutput(
            tuple(self._chunk(entry.seq, entry.count) for entry in plan),
            tuple(entry.seq for entry in plan),
            tuple(entry.decode for entry in plan),
            tuple(preempted),
            sum(entry.queried for entry in plan),
            sum(entry.hit for entry in plan),
        )

    def _budget_left(self, plan: list[_Entry]) -> int:
        return self.config.max_num_batched_tokens - sum(entry.count for entry in plan)

    def _admit(self, plan: list[_Entry], preempted: list[Request], now: float) -> None:
        """Move waiting sequences to running while the budget, the caps and the KV blocks allow;
        the head that does not fit blocks the ones behind it (no overtaking). Under `priority`
        (iteration mode) a head that does not fit displaces running sequences that rank below it."""
        displaced = {id(seq) for seq in preempted}
        for seq in list(self.waiting):
            if id(seq) in displaced:
                continue  # preempted in this step: it resumes in a later one
            if self.config.mode != "iteration" and seq.seq_id not in self._batch:
                continue
            admission = self._admission(seq, plan) or self._displace_for(seq, plan, preempted, displaced)
            if admission is None:
                break
            self.waiting.remove(seq)
            self.blocks.take(seq.block_table, admission.hit)
            seq.num_computed_tokens = admission.cached_tokens
            self.blocks.grow(seq.block_table, seq.num_computed_tokens + admission.count)
            seq.status = RequestStatus.RUNNING
            if seq.first_scheduled is None:
                seq.first_scheduled = now
            self.running.append(seq)
            queried = seq.num_tokens if self.blocks.prefix_caching else 0
            plan.append(_Entry(seq, admission.count, False, queried, admission.cached_tokens))

    def _admission(self, seq: Request, plan: list[_Entry]) -> _Admission | None:
        """How `seq` (waiting: no KV yet) enters this step, None when the budget, the caps or
        the free blocks leave no room for it."""
        budget = self._budget_left(plan)
        if budget <= 0 or len(self.running) >= self.max_batch or len(plan) >= self.config.max_num_seqs:
            return None
        if not self._adapter_fits(seq):
            return None  # as the head, it blocks the queue: the running adapters drain, none starves
        hit: list[int] = []
        if self.blocks.prefix_caching:
            hashes = chain_hashes(seq.token_ids, self.blocks.block_size, seq.block_hashes, root=seq.hash_root)
            hit = self.blocks.lookup(hashes, seq.num_tokens)
        cached = len(hit) * self.blocks.block_size
        count = min(seq.num_tokens - cached, self.config.long_prefill_token_threshold, budget)
        if self.blocks.blocks_needed(hit, cached + count) > self.blocks.num_free:
            return None
        return _Admission(hit, cached, count)

    def _adapter_fits(self, seq: Request) -> bool:
        """At most `max_loras` distinct adapters among the running sequences (the base model is none)."""
        name = seq.request.params.lora_name
        if name is None:
            return True
        running = {other.request.params.lora_name for other in self.running} - {None}
        return name in running or len(running) < self.config.max_loras

    def _displace_for(self, seq: Request, plan: list[_Entry], preempted: list[Request], displaced: set[int]) -> _Admission | None:
        """Priority preemption (vLLM's priority policy): preempt the lowest-ranked running
        sequences, while they rank below `seq`, until it fits. Equal priorities never displace
        each other (the later arrival ranks below), so this cannot ping-pong."""
        if self.config.policy != "priority" or self.config.mode != "iteration":
            return None
        while (admission := self._admission(seq, plan)) is None:
            if not self.running:
                return None
            victim = max(self.running, key=self._key)
            if self._key(victim) <= self._key(seq):
                return None
            plan[:] = [entry for entry in plan if entry.seq is not victim]
            self._preempt(victim)
            preempted.append(victim)
            displaced.add(id(victim))
        return admission

    def _form_batch(self) -> None:
        """Request and none modes: the next batch is the head of the waiting queue."""
        heads = list(self.waiting)[: self.max_batch]
        self._batch = {seq.seq_id for seq in heads}

    def _preempt(self, seq: Request) -> None:
        """Preemption by recompute: drop the KV; every token so far is prefilled again later."""
        self.running.remove(seq)
        self.blocks.release(seq.block_table)
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        seq.status = RequestStatus.WAITING
        self.waiting.add(seq)

    @staticmethod
    def _chunk(seq: Request, count: int) -> ScheduledChunk:
        start = seq.num_computed_tokens
        return ScheduledChunk(
            seq_id=seq.seq_id,
            token_ids=tuple(seq.token_ids[start : start + count]),
            start_position=start,
            block_table=tuple(seq.block_table),
            sample=start + count == seq.num_tokens,
            adapter_slot=seq.adapter_slot,
        )

    def commit(self, scheduled: SchedulerOutput, sampled: Mapping[int, int]) -> None:
        """After the step ran: its tokens are in the KV cache (blocks it filled are cached
        under their hashes); append each sampled token."""
        size = self.blocks.block_size
        for chunk, seq in zip(scheduled.chunks, scheduled.seqs):
            if seq.status is not RequestStatus.RUNNING:
                continue
            before = seq.num_computed_tokens // size
            seq.num_computed_tokens += len(chunk.token_ids)
            if self.blocks.prefix_caching and seq.num_computed_tokens // size > before:
                hashes = chain_hashes(seq.token_ids, size, seq.block_hashes, seq.num_computed_tokens, seq.hash_root)
                full = seq.num_computed_tokens // size
                self.blocks.register(seq.block_table[before:full], hashes[before:full])
            if chunk.sample:
                seq.token_ids.append(sampled[seq.seq_id])
