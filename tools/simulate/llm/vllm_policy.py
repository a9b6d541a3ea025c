"""vLLM's V1 scheduler, as far as our scheduler can follow it: the simulator's model of a vLLM config.

Both plan a step the same way (vLLM 0.32, v1/core/sched/scheduler.py): running requests first
(decodes and continuing prefill chunks), then waiting ones, under a token budget
(max_num_batched_tokens) and a sequence cap (max_num_seqs), a prompt chunk capped by
long_prefill_token_threshold, no waiting for company (max_wait_ms 0), prefix caching by full
blocks, preemption by recompute of the latest admitted request only when KV blocks run out.
Where they differ:

1. With a single request in the engine (running + waiting <= 1) vLLM lifts the chunk cap: a
   lone prompt runs in chunks of the whole budget. VllmScheduler does the same.
2. vLLM serves its running list in admission order; ours puts every decode before the
   continuing prefill chunks. With the chunk cap off (vLLM's default, 0) at most one prompt is
   part-way through its prefill, the latest admitted, so both orders are the same. With a cap
   below the budget several prompts can be part-way, and vLLM lets an older prompt's chunk take
   budget before a younger request's decode: when the chunks and decodes together exceed the
   budget, vLLM skips those decodes for a step where the simulator runs them (TPOT optimistic
   there). Not modelled: the order is inside llm/scheduler's step planner.
"""

from __future__ import annotations

import dataclasses

from llm.scheduler import Scheduler, SchedulerOutput


class VllmScheduler(Scheduler):
    """Our scheduler with vLLM's chunk-cap rule for a lone request (difference 1 above)."""

    def schedule(self, now: float) -> SchedulerOutput:
        config = self.config
        if len(self.running) + len(self.waiting) > 1 or config.long_prefill_token_threshold >= config.max_num_batched_tokens:
            return super().schedule(now)
        self.config = dataclasses.replace(config, long_prefill_token_threshold=config.max_num_batched_tokens)
        try:
            return super().schedule(now)
        finally:
            self.config = config
