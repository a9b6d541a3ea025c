"""The thread governor keeps the faster thread count, and the executor runs every step under it when asked."""

from __future__ import annotations

import torch

from llm.contract import EngineConfig, ScheduledChunk
from llm.engine import LlamaDims, LlamaExecutor
from llm.engine.checkpoint import fuse_hf_state_dict
from llm.engine.threads import FIRST_TRY_AFTER_S, LONGEST_WAIT_S, TRY_STEPS, ThreadGovernor, size_class
from tests.unit.tiny_llama import tiny_hf_llama


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(governor: ThreadGovernor, clock: Clock, seconds_with: dict[int, float], steps: int, tokens: int = 16) -> list[int]:
    """`steps` steps that take seconds_with[count] each; the counts they ran with."""
    used = []
    for _ in range(steps):
        count = governor.before_step(tokens)
        clock.now += seconds_with[count]
        governor.after_step(tokens, seconds_with[count])
        used.append(count)
    return used


def decodes(batch: int) -> list[ScheduledChunk]:
    """`batch` decodes of 3 cached tokens each, in blocks of 4 tokens."""
    return [ScheduledChunk(seq, [5 + seq], 3, (seq,), True) for seq in range(batch)]


def governor_on(clock: Clock, applied: list[int], threads: int = 2) -> ThreadGovernor:
    return ThreadGovernor(threads, applied.append, clock)


def test_a_quiet_machine_keeps_every_thread_and_tries_one_ever_more_rarely():
    clock, applied = Clock(), []
    governor = governor_on(clock, applied)
    used = run(governor, clock, {2: 0.1, 1: 0.18}, steps=3000)  # 300 s of steps
    assert governor.current == 2 and governor.switches == 0
    tries = used.count(1) // TRY_STEPS
    # waits of 2, 4, 8, 16 s, then every 30 s: about 13 tries in 300 s, never one per step
    assert 8 <= tries <= 15
    assert used.count(1) / len(used) < 0.01


def test_a_busy_machine_falls_back_to_one_thread_and_returns_when_the_neighbour_leaves():
    clock, applied = Clock(), []
    governor = governor_on(clock, applied)
    run(governor, clock, {2: 0.1, 1: 0.18}, steps=50)
    busy = run(governor, clock, {2: 2.0, 1: 0.25}, steps=100)  # spinning threads wait for a descheduled one
    assert governor.current == 1 and governor.switches == 1
    assert busy[-50:].count(2) <= TRY_STEPS * 2  # one thread, but for a rare try of two
    run(governor, clock, {2: 0.1, 1: 0.18}, steps=int(2 * LONGEST_WAIT_S / 0.18))
    assert governor.current == 2 and governor.switches == 2
    assert applied[-1] == 2


def test_a_count_must_win_by_a_clear_margin_to_be_switched_to():
    clock, applied = Clock(), []
    governor = governor_on(clock, applied)
    run(governor, clock, {2: 0.1, 1: 0.095}, steps=2000)  # 5% faster: inside the noise
    assert governor.switches == 0


def test_steps_are_compared_with_steps_of_their_own_size():
    clock, applied = Clock(), []
    governor = governor_on(clock, applied)
    for _ in range(200):  # decode steps of 16 tokens, prefill steps of 80 tokens (slower)
        for tokens, seconds in ((16, 0.1), (80, 0.4)):
            count = governor.before_step(tokens)
            clock.now += seconds if count == 2 else seconds * 1.5  # one thread is always slower at the same size
            governor.after_step(tokens, seconds if count == 2 else seconds * 1.5)
    assert governor.switches == 0  # a one-thread decode step (0.15 s) never beat a two-thread prefill (0.4 s)


def test_one_thread_configured_is_left_alone():
    clock, applied = Clock(), []
    governor = governor_on(clock, applied, threads=1)
    assert run(governor, clock, {1: 0.1}, steps=100) == [1] * 100
    assert applied == [] and not governor.active


def test_the_first_try_waits_for_a_measured_step_of_its_size():
    clock, applied = Clock(), []
    governor = governor_on(clock, applied)
    clock.now = FIRST_TRY_AFTER_S + 1
    assert governor.before_step(16) == 2  # nothing measured at 2 threads yet: nothing to compare a try with


def test_the_knob_puts_every_step_under_the_governor_and_off_leaves_the_count_alone():
    hf_model = tiny_hf_llama()
    dims = LlamaDims.from_hf_config(hf_model.config)
    tensors = fuse_hf_state_dict(hf_model.state_dict(), dims)
    before = torch.get_num_threads()
    try:
        fixed = LlamaExecutor(dims, tensors, EngineConfig(block_size=4, kv_cache_bytes=2**20, max_model_len=128, num_threads=2))
        assert fixed.thread_governor is None
        config = EngineConfig(block_size=4, kv_cache_bytes=2**20, max_model_len=128, num_threads=2, adaptive_threads=True)
        adaptive = LlamaExecutor(dims, tensors, config)
        governor = adaptive.thread_governor
        assert governor is not None and governor.threads == 2 and governor.current == 2
        clock = Clock()
        governor.clock, governor._next_try = clock, FIRST_TRY_AFTER_S
        for _ in range(3):  # a 1-token and a 5-token step, timed by the executor
            adaptive.execute(decodes(1))
            adaptive.execute(decodes(5))
        assert sorted(governor._times) == [size_class(1), size_class(5)]
        clock.now = FIRST_TRY_AFTER_S  # time for a try: the next step of a measured size runs on one thread
        adaptive.execute(decodes(1))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
