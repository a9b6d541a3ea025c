"""Priorities that preempt (policy `priority`, iteration mode): an urgent arrival displaces the
least urgent running sequence whether slots or KV blocks are short, and the displaced one keeps
its place among the requests of its priority."""

from __future__ import annotations

from llm.contract import SchedulerConfig
from llm.scheduler import RequestStatus
from tests.unit.llm_fakes import reference_tokens
from tests.unit.test_llm_scheduler import Driver, ids


def assert_reference_outputs(driver: Driver) -> None:
    for seq in driver.seqs:
        assert seq.output_token_ids == reference_tokens(seq.token_ids[: seq.num_prompt_tokens], seq.request.params.max_tokens)


def test_a_displaced_request_returns_ahead_of_later_arrivals_of_its_priority() -> None:
    driver = Driver(SchedulerConfig(policy="priority", max_num_seqs=2, max_num_batched_tokens=64), num_blocks=64)
    first = driver.add([1, 2, 3], max_tokens=12, priority=5, arrival=0.0)
    second = driver.add([4, 5, 6], max_tokens=12, priority=5, arrival=1.0)
    driver.step()
    later = driver.add([7, 8], max_tokens=3, priority=5, arrival=2.0)
    urgent = driver.add([9, 10], max_tokens=3, priority=0, arrival=3.0)
    plan = driver.step()
    assert plan.preempted == (second,) and set(ids(plan)) == {first.seq_id, urgent.seq_id}
    assert list(driver.scheduler.waiting) == [second, later]
    readmitted = []
    while driver.scheduler.has_work:
        plan = driver.step()
        readmitted += [seq for seq in plan.seqs if seq in (second, later) and seq not in readmitted]
    assert readmitted[0] is second, "the displaced request resumed before the later arrival of its priority"
    assert driver.finished.index(urgent) < driver.finished.index(second)
    assert_reference_outputs(driver)


def test_an_urgent_request_displaces_when_kv_blocks_not_slots_are_short() -> None:
    config = SchedulerConfig(policy="priority", max_num_seqs=8, max_num_batched_tokens=64, enable_prefix_caching=False)
    driver = Driver(config, num_blocks=6, block_size=4)  # 24 positions: two 12-token requests fill them
    batch = [driver.add(list(range(1 + 8 * i, 9 + 8 * i)), max_tokens=4, priority=9, arrival=float(i)) for i in range(2)]
    driver.step()
    assert driver.scheduler.blocks.num_free == 2
    urgent = driver.add([30, 31, 32, 33, 34, 35, 36, 37, 38], max_tokens=2, priority=0, arrival=5.0)  # needs 3 blocks
    plan = driver.step()
    assert plan.preempted == (batch[1],) and urgent.status is RequestStatus.RUNNING
    driver.run()
    assert driver.finished.index(urgent) < driver.finished.index(batch[1])
    assert_reference_outputs(driver)
    assert driver.scheduler.blocks.num_free == 6


def test_fcfs_never_displaces_a_running_request_for_an_urgent_one() -> None:
    driver = Driver(SchedulerConfig(policy="fcfs", max_num_seqs=1, max_num_batched_tokens=16), num_blocks=64)
    running = driver.add([1, 2], max_tokens=5, priority=9)
    driver.step()
    urgent = driver.add([3, 4], max_tokens=2, priority=0)
    assert not any(driver.step().preempted for _ in range(3)) and urgent.status is RequestStatus.WAITING
    driver.run()
    assert driver.finished == [running, urgent]
