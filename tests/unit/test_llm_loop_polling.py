"""How often the engine loop asks clients whether they went away: every running request each
step, waiting ones a few per step in turn (in Triton each question is an IPC round trip), and
which of those questions another thread asks when the loop is given one."""

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


def flooded_loop(asked: Asked, ask_off_thread=None):
    config = SchedulerConfig(max_num_seqs=RUNNING, max_num_batched_tokens=32, max_waiting=1000)
    loop, executor, recorder, _ = make_loop(config, ask_off_thread=ask_off_thread)
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


class OtherThread:
    """Stands in for the sending thread: keeps what the loop hands it, runs it when told."""

    def __init__(self) -> None:
        self.tasks: list = []

    def __call__(self, task) -> None:
        self.tasks.append(task)

    def run(self) -> None:
        tasks, self.tasks = self.tasks, []
        for task in tasks:
            task()


def test_off_thread_the_routine_questions_leave_the_engine_thread_and_an_answer_ends_the_request_next_step() -> None:
    asked, other = Asked(), OtherThread()
    loop, executor, recorder = flooded_loop(asked, ask_off_thread=other)
    other.run()  # the first step's round
    asked.calls.clear()
    asked.gone.add("r0")  # a running request's client leaves
    loop.run_one_step()
    assert sum(asked.calls.values()) == 0 and len(other.tasks) == 1  # nothing asked on the engine thread
    other.run()
    assert asked.calls["r0"] == 1 and sum(asked.calls.values()) == RUNNING + WAITING_POLLS_PER_STEP
    assert not recorder.outputs["r0"][-1].finished  # still running until the engine's next step
    loop.run_one_step()
    assert recorder.final("r0").finish_reason == "abort"
    assert all(chunk.seq_id != 0 for chunk in executor.plans[-1])


def test_off_thread_no_new_round_starts_while_the_last_is_still_being_asked() -> None:
    asked, other = Asked(), OtherThread()
    loop, _, _ = flooded_loop(asked, ask_off_thread=other)
    assert len(other.tasks) == 1
    asked.calls.clear()  # the first step's questions to the next in line, on the engine thread
    for _ in range(3):
        loop.run_one_step()
    assert len(other.tasks) == 1 and sum(asked.calls.values()) == 0  # the slow round is not piled on
    other.run()
    loop.run_one_step()
    assert len(other.tasks) == 1  # asked again once it finished


def test_off_thread_a_question_that_fails_ends_its_request_with_an_error() -> None:
    other = OtherThread()

    def broken() -> bool:
        raise ConnectionError("the server process is gone")

    loop, _, recorder, _ = make_loop(ask_off_thread=other)
    loop.submit(request("r", [1, 2], max_tokens=50), recorder.callback, is_cancelled=broken)
    loop.run_one_step()  # admitted: asked here, before its prefill
    assert recorder.final("r").finish_reason == "error"  # the engine thread's own question failed
    loop.submit(request("s", [1, 2], max_tokens=50), recorder.callback, is_cancelled=lambda: False)
    loop.run_one_step()
    later = {"broken": False}
    loop.submit(request("t", [3, 4], max_tokens=50), recorder.callback, is_cancelled=lambda: later["broken"] and broken())
    loop.run_one_step()
    other.run()
    later["broken"] = True
    loop.run_one_step()
    other.run()
    loop.run_one_step()
    assert recorder.final("t").finish_reason == "error" and "is_cancelled failed" in recorder.final("t").error
    assert not recorder.outputs["s"][-1].finished
