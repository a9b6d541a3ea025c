"""The iteration scheduler, driven step by step with a fake executor (no threads, no clock)."""

from __future__ import annotations

import random

import pytest

from llm.contract import GenerationRequest, SamplingParams, SchedulerConfig
from llm.scheduler import BlockManager, Request, RequestStatus, Scheduler, SchedulerOutput
from tests.unit.llm_fakes import FakeExecutor, reference_tokens


class Driver:
    """Schedule, execute, greedy-sample and retire finished sequences, as the loop does."""

    def __init__(self, config: SchedulerConfig, **executor_options) -> None:
        self.executor = FakeExecutor(**executor_options)
        self.scheduler = Scheduler(
            config, block_size=self.executor.block_size, num_blocks=self.executor.num_blocks, max_model_len=self.executor.max_model_len
        )
        self.seqs: list[Request] = []
        self.finished: list[Request] = []
        self.now = 0.0

    def add(self, prompt: list[int], max_tokens: int = 4, *, priority: int = 0, arrival: float | None = None) -> Request:
        arrival = self.now if arrival is None else arrival
        request = GenerationRequest(f"r{len(self.seqs)}", prompt, SamplingParams(max_tokens=max_tokens, priority=priority), arrival)
        seq = Request.from_request(len(self.seqs), request)
        self.scheduler.add(seq)
        self.seqs.append(seq)
        return seq

    def step(self) -> SchedulerOutput:
        plan = self.scheduler.schedule(self.now)
        if not plan.empty:
            logits = self.executor.execute(plan.chunks)
            tokens = logits.argmax(dim=-1).tolist()
            self.scheduler.commit(plan, {seq.seq_id: token for seq, token in zip(plan.sampled_seqs, tokens)})
            for seq in plan.sampled_seqs:
                if len(seq.output_token_ids) >= seq.request.params.max_tokens:
                    self.scheduler.finish(seq)
                    self.finished.append(seq)
        self.now += 0.001
        return plan

    def run(self, max_steps: int = 10_000) -> list[SchedulerOutput]:
        plans = []
        while self.scheduler.has_work:
            plans.append(self.step())
            assert len(plans) < max_steps, "the scheduler made no progress"
        return plans


def ids(plan: SchedulerOutput) -> list[int]:
    return [chunk.seq_id for chunk in plan.chunks]


def test_block_manager_hands_out_each_block_once_and_takes_them_back() -> None:
    blocks = BlockManager(num_blocks=3, block_size=4)
    table: list[int] = []
    blocks.grow(table, 9)
    assert len(table) == 3 and blocks.num_free == 0
    assert not blocks.can_grow([], 1)
    blocks.release(table)
    assert table == [] and blocks.num_free == 3


def test_the_token_budget_and_the_sequence_cap_are_never_exceeded() -> None:
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=24, long_prefill_token_threshold=16)
    driver = Driver(config, num_blocks=40)
    rng = random.Random(7)
    for step in range(300):
        if step % 3 == 0 and len(driver.seqs) < 40:
            driver.add([rng.randrange(1, 40) for _ in range(rng.randint(1, 60))], max_tokens=rng.randint(1, 12))
        plan = driver.step()
        assert plan.num_tokens <= 24
        assert len(plan.chunks) <= 4
    driver.run()
    for seq in driver.seqs:
        assert seq.output_token_ids == reference_tokens(seq.token_ids[: seq.num_prompt_tokens], seq.request.params.max_tokens)
    assert driver.scheduler.blocks.num_free == 40


def test_running_decodes_are_scheduled_every_step_while_a_long_prompt_prefills() -> None:
    config = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=32, long_prefill_token_threshold=16)
    driver = Driver(config, num_blocks=200)
    streams = [driver.add([i + 1, 2, 3], max_tokens=40) for i in range(3)]
    driver.step()  # the three short prompts prefill together
    long_prompt = driver.add([5] * 400, max_tokens=2)
    for _ in range(20):
        plan = driver.step()
        assert {s.seq_id for s in streams} <= set(ids(plan)), "a running stream was left out of a step"
        assert all(plan.decodes[i] for i, seq in enumerate(plan.seqs) if seq in streams)
        assert long_prompt.seq_id in ids(plan)
    assert 0 < long_prompt.num_computed_tokens < 400


def test_a_long_prompt_runs_in_chunks_of_the_threshold_and_samples_only_at_its_end() -> None:
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, long_prefill_token_threshold=16)
    driver = Driver(config, num_blocks=64)
    driver.add(list(range(1, 40)) + [7] * 11, max_tokens=1)  # 50 tokens
    plans = driver.run()
    chunks = [plan.chunks[0] for plan in plans]
    assert [len(c.token_ids) for c in chunks] == [16, 16, 16, 2]
    assert [c.start_position for c in chunks] == [0, 16, 32, 48]
    assert [c.sample for c in chunks] == [False, False, False, True]
    assert all(len(c.block_table) * 4 >= c.start_position + len(c.token_ids) for c in chunks)


def test_out_of_blocks_the_latest_arrival_is_preempted_and_resumes_ahead_of_new_arrivals() -> None:
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, long_prefill_token_threshold=64)
    driver = Driver(config, num_blocks=6, block_size=4)  # 24 token positions
    first = driver.add([1, 2, 3, 4, 5, 6, 7], max_tokens=8, arrival=0.0)
    second = driver.add([8, 9, 10, 11, 12, 13, 14], max_tokens=8, arrival=1.0)
    preempted: list[Request] = []
    newcomer = None
    while driver.scheduler.has_work:
        plan = driver.step()
        preempted += plan.preempted
        if preempted and newcomer is None:
            newcomer = driver.add([15, 16], max_tokens=2, arrival=driver.now + 10)
            assert driver.scheduler.waiting.peek() is second
    assert preempted and preempted[0] is second
    assert second.num_preemptions >= 1 and first.num_preemptions == 0
    assert newcomer is not None and driver.finished.index(second) < driver.finished.index(newcomer)
    for seq in driver.seqs:
        assert seq.output_token_ids == reference_tokens(seq.token_ids[: seq.num_prompt_tokens], seq.request.params.max_tokens)


def test_without_prefix_caching_a_preempted_sequence_refeeds_its_prompt_and_generated_tokens() -> None:
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, long_prefill_token_threshold=64, enable_prefix_caching=False)
    driver = Driver(config, num_blocks=6, block_size=4)
    driver.add([1, 2, 3, 4, 5, 6, 7], max_tokens=8, arrival=0.0)
    second = driver.add([8, 9, 10, 11, 12, 13, 14], max_tokens=8, arrival=1.0)
    while not second.num_preemptions:
        driver.step()
    generated_before = list(second.output_token_ids)
    assert generated_before and second.block_table == [] and second.status is RequestStatus.WAITING
    while second.num_computed_tokens == 0:
        plan = driver.step()
    refeed = next(c for c in plan.chunks if c.seq_id == second.seq_id)
    assert list(refeed.token_ids) == [8, 9, 10, 11, 12, 13, 14, *generated_before][: len(refeed.token_ids)]
    assert refeed.start_position == 0


def test_priority_policy_admits_lower_values_first_then_by_arrival() -> None:
    config = SchedulerConfig(policy="priority", max_num_seqs=1, max_num_batched_tokens=64)
    driver = Driver(config)
    low = driver.add([1], max_tokens=1, priority=5, arrival=0.0)
    high_late = driver.add([2], max_tokens=1, priority=0, arrival=2.0)
    high_early = driver.add([3], max_tokens=1, priority=0, arrival=1.0)
    order = [plan.seqs[0] for plan in driver.run()]
    assert order == [high_early, high_late, low]


def test_fcfs_policy_ignores_priority() -> None:
    driver = Driver(SchedulerConfig(policy="fcfs", max_num_seqs=1, max_num_batched_tokens=64))
    a = driver.add([1], max_tokens=1, priority=5, arrival=0.0)
    b = driver.add([2], max_tokens=1, priority=0, arrival=1.0)
    assert [plan.seqs[0] for plan in driver.run()] == [a, b]


def test_under_priority_the_victim_is_the_lowest_priority_latest_arrival() -> None:
    config = SchedulerConfig(policy="priority", max_num_seqs=4, max_num_batched_tokens=64, long_prefill_token_threshold=64)
    driver = Driver(config, num_blocks=9, block_size=4)  # 36 positions; three sequences of up to 15 tokens
    important = driver.add([1, 2, 3, 4, 5, 6, 7], max_tokens=8, priority=0, arrival=2.0)
    unimportant_early = driver.add([8, 9, 10, 11, 12, 13, 14], max_tokens=8, priority=3, arrival=0.0)
    unimportant_late = driver.add([15, 16, 17, 18, 19, 20, 21], max_tokens=8, priority=3, arrival=1.0)
    victims = [victim for plan in driver.run() for victim in plan.preempted]
    assert victims and victims[0] is unimportant_late
    assert important.num_preemptions == 0
    for seq in (important, unimportant_early, unimportant_late):
        assert seq.output_token_ids == reference_tokens(seq.token_ids[: seq.num_prompt_tokens], 8)


def test_a_finished_sequence_frees_its_slot_and_blocks_before_the_next_step() -> None:
    driver = Driver(SchedulerConfig(max_num_seqs=1, max_num_batched_tokens=64), num_blocks=8)
    first = driver.add([1, 2, 3], max_tokens=1)
    second = driver.add([4, 5, 6], max_tokens=1)
    assert ids(driver.step()) == [first.seq_id]
    assert first.status is RequestStatus.FINISHED and driver.scheduler.blocks.num_free == 8
    assert ids(driver.step()) == [second.seq_id]


def test_request_mode_admits_nothing_while_a_batch_runs() -> None:
    driver = Driver(SchedulerConfig(mode="request", max_num_seqs=2, max_num_batched_tokens=64))
    short = driver.add([1], max_tokens=1)
    long = driver.add([2], max_tokens=6)
    driver.step()
    late = driver.add([3], max_tokens=1)
    while long.status is not RequestStatus.FINISHED:
        plan = driver.step()
        assert late.seq_id not in ids(plan), "a request joined a batch in flight"
        assert short.status is RequestStatus.FINISHED
    assert ids(driver.step()) == [late.seq_id]


def test_request_mode_waits_up_to_max_wait_for_a_fuller_batch() -> None:
    driver = Driver(SchedulerConfig(mode="request", max_num_seqs=2, max_num_batched_tokens=64, max_wait_ms=10))
    first = driver.add([1], max_tokens=1, arrival=0.0)
    assert driver.scheduler.next_step_time(0.0) == pytest.approx(0.010)
    assert driver.scheduler.schedule(0.005).empty
    second = driver.add([2], max_tokens=1, arrival=0.006)
    assert driver.scheduler.next_step_time(0.006) == 0.006  # the batch is full
    assert set(ids(driver.scheduler.schedule(0.006))) == {first.seq_id, second.seq_id}


def test_iteration_mode_waits_for_arrivals_only_while_idle() -> None:
    driver = Driver(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_wait_ms=10))
    driver.add([1], max_tokens=3, arrival=0.0)
    assert driver.scheduler.next_step_time(0.0) == pytest.approx(0.010)
    driver.now = 0.010
    driver.step()
    assert driver.scheduler.next_step_time(driver.now) == driver.now  # a running stream never waits


def test_none_mode_runs_one_sequence_at_a_time() -> None:
    driver = Driver(SchedulerConfig(mode="none", max_num_seqs=8, max_num_batched_tokens=64))
    seqs = [driver.add([i + 1, 2], max_tokens=3) for i in range(3)]
    plans = driver.run()
    assert all(len(plan.chunks) == 1 for plan in plans)
    assert [plan.seqs[0] for plan in plans] == [seqs[0]] * 3 + [seqs[1]] * 3 + [seqs[2]] * 3


def test_a_request_longer_than_max_model_len_is_refused_naming_the_limit() -> None:
    scheduler = Scheduler(SchedulerConfig(), block_size=4, num_blocks=1000, max_model_len=100)
    with pytest.raises(ValueError, match=r"max_model_len 100\); lower max_tokens to at most 10"):
        scheduler.check_fits(90, 20)
    with pytest.raises(ValueError, match=r"exceeds the KV cache \(20 tokens\)"):
        Scheduler(SchedulerConfig(), block_size=4, num_blocks=5, max_model_len=100).check_fits(10, 20)
    with pytest.raises(ValueError, match="no tokens"):
        scheduler.check_fits(0, 20)


def test_a_config_whose_budget_cannot_hold_one_token_per_sequence_is_refused() -> None:
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        Scheduler(SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=4), block_size=4, num_blocks=8, max_model_len=64)
    with pytest.raises(ValueError, match="mode"):
        Scheduler(SchedulerConfig(mode="batch"), block_size=4, num_blocks=8, max_model_len=64)


def test_under_priority_a_more_important_arrival_displaces_the_lowest_ranked_running_sequence() -> None:
    config = SchedulerConfig(policy="priority", max_num_seqs=2, max_num_batched_tokens=64)
    driver = Driver(config, num_blocks=64)
    early = driver.add([1, 2], max_tokens=20, priority=5, arrival=0.0)
    late = driver.add([3, 4], max_tokens=20, priority=5, arrival=1.0)
    driver.step()
    peer = driver.add([5, 6], max_tokens=2, priority=5, arrival=2.0)
    plan = driver.step()
    assert plan.preempted == () and peer.status is RequestStatus.WAITING  # equal priority waits its turn
    urgent = driver.add([7, 8], max_tokens=2, priority=0, arrival=3.0)
    plan = driver.step()
    assert plan.preempted == (late,) and set(ids(plan)) == {early.seq_id, urgent.seq_id}
    driver.run()
    assert driver.finished.index(urgent) < driver.finished.index(late)
    for seq in driver.seqs:
        assert seq.output_token_ids == reference_tokens(seq.token_ids[: seq.num_prompt_tokens], seq.request.params.max_tokens)


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
@pytest.mark.parametrize("seed", range(4))
def test_random_traffic_on_a_tight_kv_cache_keeps_every_invariant(policy: str, seed: int) -> None:
    """Arrivals, cancellations, preemptions and displacements at random: plans stay in budget,
    no block is shared (the fake asserts it), every survivor gets the reference tokens, and
    every block comes back."""
    rng = random.Random(seed)
    config = SchedulerConfig(policy=policy, max_num_seqs=6, max_num_batched_tokens=20, long_prefill_token_threshold=8)
    driver = Driver(config, num_blocks=14, block_size=4)
    cancelled: set[int] = set()
    preemptions = 0
    for step in range(400):
        if step < 250 and rng.random() < 0.3:
            driver.add([rng.randrange(1, 40) for _ in range(rng.randint(1, 20))], max_tokens=rng.randint(1, 12), priority=rng.randint(0, 2))
        if rng.random() < 0.03:
            open_seqs = [s for s in driver.seqs if s.status is not RequestStatus.FINISHED]
            if open_seqs:
                victim = rng.choice(open_seqs)
                driver.scheduler.finish(victim)
                cancelled.add(victim.seq_id)
        plan = driver.step()
        preemptions += len(plan.preempted)
        assert plan.num_tokens <= 20 and len(plan.chunks) <= 6
        assert len(driver.scheduler.running) <= 6
    driver.run()
    assert preemptions > 0, "the cache was not tight enough to exercise preemption"
    for seq in driver.seqs:
        if seq.seq_id not in cancelled:
            assert seq.output_token_ids == reference_tokens(seq.token_ids[: seq.num_prompt_tokens], seq.request.params.max_tokens)
    assert driver.scheduler.blocks.num_free == 14
