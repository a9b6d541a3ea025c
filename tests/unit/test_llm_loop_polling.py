"""How often the engine loop asks clients whether they went away: every running request each
step, waiting ones a few per step in turn (in Triton each question is an IPC round trip)."""

from __future__ import annotations

from collections import Counter

from llm.contract import SchedulerConfig
from llm.loop import WAITING_POLLS_PER_STEP
from tests.unit.test_llm_loop import make_loop, request

RUNNING = 2
WAITING = 5 * WAITING_POLLS_PER_STEP


class Asked:
    """Counts is_cancelled() calls per request; answers True for the ones marked gone."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.gone: set[str] = set()

    def probe(self, request_id: str):
        def is_cancelled() -> bool:
            self.calls[request_id] += 1
            return request_id in self.gone

        return is_cancelled


def flooded_loop(asked: Asked):
    loop, executor, recorder, _ = make_loop(SchedulerConfig(max_num_seqs=RUNNING, max_num_batched_tokens=32, max_waiting=1000))
    for i in range(RUNNING + WAITING):
        loop.submit(request(f"r{i}", [1, 2], max_tokens=50, ignore_eos=True), recorder.callback, is_cancelled=asked.probe(f"r{i}"))
    loop.run_one_step()  # admits the first RUNNING; the rest wait behind them
    return loop, executor, recorder


def test_a_step_asks_every_running_request_and_only_a_few_waiting_ones() -> None:
    asked = Asked()
    loop, _, _ = flooded_loop(asked)
    asked.calls.clear()
    loop.run_one_step()
    assert sum(asked.calls.values()) == RUNNING + WAITING_POLLS_PER_STEP
    assert all(asked.calls[f"r{i}"] == 1 for i in range(RUNNING))


def test_every_waiting_request_is_asked_in_turn_within_a_round() -> None:
    asked = Asked()
    loop, _, _ = flooded_loop(asked)
    asked.calls.clear()
    for _ in range(WAITING // WAITING_POLLS_PER_STEP):
        loop.run_one_step()
    assert all(asked.calls[f"r{i}"] == 1 for i in range(RUNNING, RUNNING + WAITING))


def test_a_waiting_request_whose_client_left_is_aborted_without_being_scheduled() -> None:
    asked = Asked()
    loop, executor, recorder = flooded_loop(asked)
    last = f"r{RUNNING + WAITING - 1}"
    asked.gone.add(last)
    for _ in range(WAITING // WAITING_POLLS_PER_STEP):
        loop.run_one_step()
    assert recorder.final(last).finish_reason == "abort"
    assert all(chunk.seq_id < RUNNING for plan in executor.plans for chunk in plan)
    assert loop.snapshot()["waiting"] == WAITING - 1


def test_waiting_requests_next_in_line_are_asked_before_admission_so_gone_clients_cost_no_prefill() -> None:
    asked = Asked()
    loop, executor, recorder = flooded_loop(asked)
    gone_heads = WAITING // 2
    asked.gone.update(f"r{i}" for i in range(RUNNING + gone_heads))  # the running ones and the next in line all left
    asked.calls.clear()
    executor.plans.clear()
    loop.run_one_step()
    assert all(recorder.final(f"r{i}").finish_reason == "abort" for i in range(RUNNING + gone_heads))
    admitted = {chunk.seq_id for plan in executor.plans for chunk in plan}
    assert admitted == set(range(RUNNING + gone_heads, 2 * RUNNING + gone_heads))  # the first live ones take the slots
    # asked: the running, the gone heads, the live ones that took the slots, and the usual few in turn
    assert sum(asked.calls.values()) == RUNNING + gone_heads + RUNNING + WAITING_POLLS_PER_STEP
    assert loop.snapshot()["waiting"] == WAITING - gone_heads - RUNNING
