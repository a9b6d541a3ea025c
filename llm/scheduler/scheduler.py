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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from llm.contract import ScheduledChunk, SchedulerConfig
from llm.scheduler.block_manager import BlockManager, blocks_for
from llm.scheduler.queue import WaitingQueue, order_key
from llm.scheduler.sequence import Sequence, SequenceStatus

MODES = ("iteration", "request", "none")


@dataclass(frozen=True)
class StepPlan:
    """One step: `chunks[i]` feeds `seqs[i]` (a decode when `decodes[i]`); `preempted` lost
    their KV this step."""

    chunks: tuple[ScheduledChunk, ...]
    seqs: tuple[Sequence, ...]
    decodes: tuple[bool, ...] = ()
    preempted: tuple[Sequence, ...] = ()

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
    def sampled_seqs(self) -> tuple[Sequence, ...]:
        """The sequences whose logits the executor returns, in its row order."""
        return tuple(seq for chunk, seq in zip(self.chunks, self.seqs) if chunk.sample)


@dataclass
class _Entry:
    seq: Sequence
    count: int  # tokens fed this step
    decode: bool


class Scheduler:
    def __init__(self, config: SchedulerConfig, *, block_size: int, num_blocks: int, max_model_len: int) -> None:
        if config.mode not in MODES:
            raise ValueError(f"unknown scheduler mode {config.mode!r}; expected one of {', '.join(MODES)}")
        if config.max_num_seqs <= 0 or config.long_prefill_token_threshold <= 0 or config.max_wait_ms < 0:
            raise ValueError("max_num_seqs and long_prefill_token_threshold must be positive, max_wait_ms not negative")
        if config.max_num_batched_tokens < config.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({config.max_num_batched_tokens}) must be at least max_num_seqs "
                f"({config.max_num_seqs}): every running sequence needs a token per step"
            )
        self.config = config
        self.max_model_len = max_model_len
        self.blocks = BlockManager(num_blocks, block_size)
        self.waiting = WaitingQueue(config.policy)
        self.running: list[Sequence] = []
        self._key = order_key(config.policy)
        self._batch: set[int] = set()  # request and none modes: the members of the batch in flight
        self.max_batch = 1 if config.mode == "none" else config.max_num_seqs

    # -- requests in and out ------------------------------------------------------------

    def check_fits(self, num_prompt_tokens: int, max_tokens: int) -> None:
        """Raise ValueError (naming the limit) for a request that could never run."""
        if num_prompt_tokens <= 0:
            raise ValueError("the prompt is empty")
        if max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        total = num_prompt_tokens + max_tokens
        if total > self.max_model_len:
            raise ValueError(
                f"prompt ({num_prompt_tokens} tokens) + max_tokens ({max_tokens}) = {total} exceeds max_model_len ({self.max_model_len})"
            )
        needed = blocks_for(total, self.blocks.block_size)
        if needed > self.blocks.num_blocks:
            capacity = self.blocks.num_blocks * self.blocks.block_size
            raise ValueError(f"prompt + max_tokens = {total} tokens exceeds the KV cache ({capacity} tokens)")

    def add(self, seq: Sequence) -> None:
        self.check_fits(seq.num_prompt_tokens, seq.request.params.max_tokens)
        seq.status = SequenceStatus.WAITING
        self.waiting.add(seq)

    def finish(self, seq: Sequence) -> None:
        """Retire a sequence (finished or aborted): its slot and blocks are free for the next step."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        self.blocks.release(seq.block_table)
        self._batch.discard(seq.seq_id)
        seq.status = SequenceStatus.FINISHED

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

    def schedule(self, now: float) -> StepPlan:
        ready = self.next_step_time(now)
        if ready is None or ready > now:
            return StepPlan((), ())
        if self.config.mode != "iteration" and not self._batch:
            self._form_batch()
        plan: list[_Entry] = []
        preempted: list[Sequence] = []
        pending = sorted(self.running, key=lambda s: (not s.is_decoding, self._key(s)))
        unscheduled = set(id(s) for s in pending)
        for seq in pending:
            if seq.status is not SequenceStatus.RUNNING:
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
            if seq.status is not SequenceStatus.RUNNING:
                continue
            self.blocks.grow(seq.block_table, seq.num_computed_tokens + count)
            unscheduled.discard(id(seq))
            plan.append(_Entry(seq, count, seq.is_decoding))
        if not preempted:  # out of blocks for running sequences: admitting more would only thrash
            self._admit(plan, preempted, now)
        return StepPlan(
            tuple(self._chunk(entry.seq, entry.count) for entry in plan),
            tuple(entry.seq for entry in plan),
            tuple(entry.decode for entry in plan),
            tuple(preempted),
        )

    def _budget_left(self, plan: list[_Entry]) -> int:
        return self.config.max_num_batched_tokens - sum(entry.count for entry in plan)

    def _admit(self, plan: list[_Entry], preempted: list[Sequence], now: float) -> None:
        """Move waiting sequences to running while the budget, the caps and the KV blocks allow;
        the head that does not fit blocks the ones behind it (no overtaking). Under `priority`
        (iteration mode) a head that does not fit displaces running sequences that rank below it."""
        displaced = {id(seq) for seq in preempted}
        for seq in list(self.waiting):
            if id(seq) in displaced:
                continue  # preempted in this step: it resumes in a later one
            if self.config.mode != "iteration" and seq.seq_id not in self._batch:
                continue
            if not self._has_room(seq, plan) and not self._displace_for(seq, plan, preempted, displaced):
                break
            count = min(seq.num_uncomputed, self.config.long_prefill_token_threshold, self._budget_left(plan))
            self.waiting.remove(seq)
            self.blocks.grow(seq.block_table, seq.num_computed_tokens + count)
            seq.status = SequenceStatus.RUNNING
            if seq.first_scheduled is None:
                seq.first_scheduled = now
            self.running.append(seq)
            plan.append(_Entry(seq, count, False))

    def _has_room(self, seq: Sequence, plan: list[_Entry]) -> bool:
        budget = self._budget_left(plan)
        if budget <= 0 or len(self.running) >= self.max_batch or len(plan) >= self.config.max_num_seqs:
            return False
        count = min(seq.num_uncomputed, self.config.long_prefill_token_threshold, budget)
        return self.blocks.can_grow(seq.block_table, seq.num_computed_tokens + count)

    def _displace_for(self, seq: Sequence, plan: list[_Entry], preempted: list[Sequence], displaced: set[int]) -> bool:
        """Priority preemption (vLLM's priority policy): preempt the lowest-ranked running
        sequences, while they rank below `seq`, until it fits. Equal priorities never displace
        each other (the later arrival ranks below), so this cannot ping-pong."""
        if self.config.policy != "priority" or self.config.mode != "iteration":
            return False
        while not self._has_room(seq, plan):
            if not self.running:
                return False
            victim = max(self.running, key=self._key)
            if self._key(victim) <= self._key(seq):
                return False
            plan[:] = [entry for entry in plan if entry.seq is not victim]
            self._preempt(victim)
            preempted.append(victim)
            displaced.add(id(victim))
        return True

    def _form_batch(self) -> None:
        """Request and none modes: the next batch is the head of the waiting queue."""
        heads = list(self.waiting)[: self.max_batch]
        self._batch = {seq.seq_id for seq in heads}

    def _preempt(self, seq: Sequence) -> None:
        """Preemption by recompute: drop the KV; every token so far is prefilled again later."""
        self.running.remove(seq)
        self.blocks.release(seq.block_table)
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        seq.status = SequenceStatus.WAITING
        self.waiting.add(seq)

    @staticmethod
    def _chunk(seq: Sequence, count: int) -> ScheduledChunk:
        start = seq.num_computed_tokens
        return ScheduledChunk(
            seq_id=seq.seq_id,
            token_ids=tuple(seq.token_ids[start : start + count]),
            start_position=start,
            block_table=tuple(seq.block_table),
            sample=start + count == seq.num_tokens,
        )

    def commit(self, plan: StepPlan, sampled: Mapping[int, int]) -> None:
        """After the step ran: its tokens are in the KV cache; append each sampled token."""
        for chunk, seq in zip(plan.chunks, plan.seqs):
            if seq.status is not SequenceStatus.RUNNING:
                continue
            seq.num_computed_tokens += len(chunk.token_ids)
            if chunk.sample:
                seq.token_ids.append(sampled[seq.seq_id])
