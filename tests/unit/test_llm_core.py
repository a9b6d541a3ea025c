"""The engine core on its own: no thread, no callbacks, outputs returned by each call."""

from __future__ import annotations

import ast
from pathlib import Path

import llm.core
from llm.contract import GenerationRequest, RequestOutput, SamplingParams, SchedulerConfig
from llm.core import EngineCore
from tests.unit.llm_fakes import FakeExecutor, FakeTokenizer, reference_tokens
from tests.unit.test_llm_loop import Clock, Recorder


def make_core(config: SchedulerConfig | None = None) -> tuple[EngineCore, FakeExecutor, Recorder, Clock]:
    executor = FakeExecutor()
    recorder = Recorder()
    clock = Clock()
    core = EngineCore(
        executor, config or SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=32), FakeTokenizer(), recorder, clock=clock
    )
    return core, executor, recorder, clock


def request(request_id: str, prompt: list[int], at: float = 0.0, **params) -> GenerationRequest:
    return GenerationRequest(request_id, prompt, SamplingParams(**{"temperature": 0, **params}), at)


def run_to_end(core: EngineCore, steps: int = 1000) -> list[RequestOutput]:
    outputs: list[RequestOutput] = []
    for _ in range(steps):
        outputs += core.step()
        if not core.has_open_requests():
            return outputs
    raise AssertionError("the core did not finish its requests")


def test_steps_return_each_requests_tokens_and_exactly_one_finished_output() -> None:
    core, _, recorder, _ = make_core()
    prompts = {"a": [1, 2, 3], "b": [4, 5]}
    for request_id, prompt in prompts.items():
        core.add_request(request(request_id, prompt, max_tokens=6))
    outputs = run_to_end(core)
    for request_id, prompt in prompts.items():
        mine = [o for o in outputs if o.request_id == request_id]
        assert [t for o in mine for t in o.new_token_ids] == reference_tokens(prompt, 6)
        assert [o.finished for o in mine].count(True) == 1 and mine[-1].finish_reason == "length"
    assert {t.request_id for t in recorder.timings} == {"a", "b"}
    assert core.snapshot()["kv_blocks_used"] == 0


def test_abort_retires_an_open_request_at_once_and_ignores_an_unknown_id() -> None:
    core, executor, _, _ = make_core()
    core.add_request(request("a", [1] * 8, max_tokens=50))
    core.add_request(request("b", [2] * 4, max_tokens=50))
    core.step()
    output = core.abort("a")
    assert output is not None and output.finished and output.finish_reason == "abort"
    assert core.abort("a") is None
    assert core.open_request_ids() == ["b"]
    core.step()
    assert all(chunk.seq_id != 0 for chunk in executor.plans[-1])


def test_a_request_not_scheduled_within_its_queue_timeout_times_out() -> None:
    core, _, _, clock = make_core(SchedulerConfig(max_num_seqs=1, max_num_batched_tokens=32))
    core.add_request(request("busy", [1, 2], at=clock.now, max_tokens=50))
    core.add_request(request("late", [3, 4], at=clock.now, max_tokens=5, queue_timeout_ms=10))
    core.step()
    outputs = core.step(now=clock.now + 1.0)
    late = [o for o in outputs if o.request_id == "late"]
    assert len(late) == 1 and late[0].finish_reason == "timeout" and "queue_timeout_ms=10" in (late[0].error or "")


def test_a_failed_forward_ends_only_its_own_requests_with_an_error() -> None:
    core, executor, _, _ = make_core()
    core.add_request(request("a", [1, 2], max_tokens=5))
    executor.fail_next = True
    outputs = core.step()
    assert [(o.request_id, o.finish_reason) for o in outputs] == [("a", "error")]
    assert "injected failure" in (outputs[0].error or "")


def test_abort_all_ends_the_open_requests_and_those_never_taken_in() -> None:
    core, _, recorder, _ = make_core()
    core.add_request(request("open", [1, 2], max_tokens=5))
    core.step()
    outputs = core.abort_all("stopped", [request("queued", [3], max_tokens=5)])
    assert [(o.request_id, o.finish_reason, o.error) for o in outputs] == [("open", "error", "stopped"), ("queued", "error", "stopped")]
    assert not core.has_open_requests() and len(recorder.timings) == 2


def test_the_core_has_no_thread_lock_or_sleep() -> None:
    """It is driven by a loop thread in the server and by a simulated clock elsewhere: a
    thread, a lock or a sleep of its own would tie it to one of them."""
    tree = ast.parse(Path(llm.core.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not imported & {"threading", "queue", "asyncio", "concurrent.futures"}
    calls = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert "sleep" not in calls
