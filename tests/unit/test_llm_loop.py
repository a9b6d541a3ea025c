"""The engine loop on a fake executor: outputs, cancellation, errors, limits, the thread."""

from __future__ import annotations

import threading
from collections import defaultdict

import pytest

from llm.contract import GenerationRequest, RequestOutput, RequestTimings, SamplingParams, SchedulerConfig, StepStats
from llm.loop import RUNNING_POLL_INTERVAL_S, EngineLoop, QueueFullError
from tests.unit.llm_fakes import EOS, FakeExecutor, FakeTokenizer, reference_tokens


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


class Recorder:
    """Collects every output per request, and the observer's reports."""

    def __init__(self) -> None:
        self.outputs: dict[str, list[RequestOutput]] = defaultdict(list)
        self.steps: list[StepStats] = []
        self.timings: list[RequestTimings] = []
        self.done = threading.Event()
        self.expected = 0

    def callback(self, output: RequestOutput) -> None:
        self.outputs[output.request_id].append(output)
        if output.finished and sum(o[-1].finished for o in self.outputs.values()) >= self.expected:
            self.done.set()

    def on_step(self, stats: StepStats) -> None:
        self.steps.append(stats)

    def on_finished(self, timings: RequestTimings) -> None:
        self.timings.append(timings)

    def tokens(self, request_id: str) -> list[int]:
        return [t for output in self.outputs[request_id] for t in output.new_token_ids]

    def final(self, request_id: str) -> RequestOutput:
        finals = [o for o in self.outputs[request_id] if o.finished]
        assert len(finals) == 1, f"{request_id} got {len(finals)} finished outputs"
        return finals[0]


def make_loop(
    config: SchedulerConfig | None = None, ask_off_thread=None, **executor_options
) -> tuple[EngineLoop, FakeExecutor, Recorder, Clock]:
    executor = FakeExecutor(**executor_options)
    recorder = Recorder()
    clock = Clock()
    config = config or SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=32)
    loop = EngineLoop(executor, config, FakeTokenizer(), recorder, clock=clock, ask_off_thread=ask_off_thread)
    return loop, executor, recorder, clock


def request(request_id: str, prompt: list[int], at: float = 0.0, **params) -> GenerationRequest:
    return GenerationRequest(request_id, prompt, SamplingParams(**{"temperature": 0, **params}), at)


def drain(loop: EngineLoop, steps: int = 1000) -> None:
    for _ in range(steps):
        loop.run_one_step()
        snapshot = loop.snapshot()
        if not snapshot["running"] and not snapshot["waiting"]:
            return
    raise AssertionError("the loop did not finish its requests")


def test_concurrent_requests_get_their_own_greedy_tokens_and_one_finished_output() -> None:
    loop, _, recorder, _ = make_loop()
    prompts = {f"r{i}": [i + 1, 3, 5 + i] * (i + 1) for i in range(6)}
    for request_id, prompt in prompts.items():
        loop.submit(request(request_id, prompt, max_tokens=5 + 2 * int(request_id[1:])), recorder.callback)
    drain(loop)
    for request_id, prompt in prompts.items():
        expected = reference_tokens(prompt, 5 + 2 * int(request_id[1:]))
        assert recorder.tokens(request_id) == expected
        final = recorder.final(request_id)
        assert final.finish_reason == "length" and final.num_output_tokens == len(expected)
        assert "".join(o.new_text for o in recorder.outputs[request_id]) == FakeTokenizer().decode(expected)
    assert loop.snapshot()["kv_blocks_used"] == 0


def test_the_observer_sees_every_step_and_every_finished_request() -> None:
    loop, executor, recorder, _ = make_loop()
    loop.submit(request("a", [1, 2, 3], max_tokens=4), recorder.callback)
    loop.submit(request("b", [4, 5], max_tokens=2), recorder.callback)
    drain(loop)
    assert len(recorder.steps) == len(executor.plans)
    assert recorder.steps[0].prefill_tokens == 5 and recorder.steps[0].decode_seqs == 0
    assert recorder.steps[1].decode_seqs == 2
    timings = {t.request_id: t for t in recorder.timings}
    assert timings["a"].output_tokens == 4 and len(timings["a"].inter_token_s) == 3
    assert timings["a"].ttft_s is not None and timings["a"].queue_s is not None
    assert timings["a"].ttft_s <= timings["a"].e2e_s


def test_cancel_frees_the_blocks_within_a_step_and_finishes_with_abort() -> None:
    loop, executor, recorder, _ = make_loop()
    loop.submit(request("long", [1] * 20, max_tokens=50), recorder.callback)
    loop.submit(request("other", [2] * 4, max_tokens=50), recorder.callback)
    for _ in range(3):
        loop.run_one_step()
    used = loop.snapshot()["kv_blocks_used"]
    loop.cancel("long")
    loop.run_one_step()
    assert recorder.final("long").finish_reason == "abort"
    assert loop.snapshot()["kv_blocks_used"] < used - 4
    assert all(chunk.seq_id != 0 for chunk in executor.plans[-1])


def test_a_running_request_is_asked_on_its_first_step_then_once_per_poll_interval() -> None:
    loop, _, recorder, clock = make_loop()
    gone = threading.Event()
    asked = []

    def is_cancelled() -> bool:
        asked.append(clock.now)
        return gone.is_set()

    loop.submit(request("client", [1, 2], max_tokens=50), recorder.callback, is_cancelled=is_cancelled)
    loop.run_one_step()  # admitted (asked before admission)
    loop.run_one_step()  # its first step running: asked
    count = len(asked)
    gone.set()
    loop.run_one_step()  # within the interval: not asked again, still running
    assert len(asked) == count and not any(output.finished for output in recorder.outputs["client"])
    clock.now += RUNNING_POLL_INTERVAL_S
    loop.run_one_step()
    assert recorder.final("client").finish_reason == "abort"
    assert loop.snapshot() == {"running": 0, "waiting": 0, "kv_blocks_used": 0, "kv_blocks_total": 64}


def test_a_finished_request_frees_its_slot_in_the_same_step() -> None:
    loop, executor, recorder, _ = make_loop(SchedulerConfig(max_num_seqs=1, max_num_batched_tokens=32))
    loop.submit(request("first", [1, 2], max_tokens=1), recorder.callback)
    loop.submit(request("second", [3, 4], max_tokens=1), recorder.callback)
    loop.run_one_step()
    assert recorder.final("first").finished
    assert loop.snapshot()["running"] == 0 and loop.snapshot()["waiting"] == 1
    loop.run_one_step()
    assert [chunk.seq_id for chunk in executor.plans[1]] == [1]


def test_a_seeded_request_gives_the_same_text_whatever_shares_its_steps() -> None:
    def run(extra: int) -> list[int]:
        loop, _, recorder, _ = make_loop()
        loop.submit(request("seeded", [1, 2, 3], max_tokens=12, temperature=1.0, seed=11), recorder.callback)
        for i in range(extra):
            loop.submit(request(f"x{i}", [4 + i], max_tokens=3 + i, temperature=1.0), recorder.callback)
        drain(loop)
        return recorder.tokens("seeded")

    assert run(0) == run(3)


def test_a_stop_string_across_tokens_ends_the_request_with_the_text_before_it() -> None:
    loop, _, recorder, _ = make_loop()
    expected = reference_tokens([1, 2], 8)
    stop = f"<{expected[3]}><{expected[4]}>"
    loop.submit(request("s", [1, 2], max_tokens=8, stop=(stop,)), recorder.callback)
    drain(loop)
    assert recorder.final("s").finish_reason == "stop"
    text = "".join(o.new_text for o in recorder.outputs["s"])
    full = FakeTokenizer().decode(expected)
    assert text == full[: full.index(stop)] and stop not in text


def eos_after_two(context) -> int:
    """EOS once the context is 4 tokens long (a 2-token prompt + 2 generated)."""
    return EOS if len(context) >= 4 else 7


def test_eos_finishes_with_stop_unless_min_tokens_or_ignore_eos() -> None:
    loop, _, recorder, _ = make_loop(rule=eos_after_two)
    loop.submit(request("plain", [1, 2], max_tokens=10), recorder.callback)
    loop.submit(request("min", [1, 2], max_tokens=10, min_tokens=5), recorder.callback)
    loop.submit(request("ignore", [1, 2], max_tokens=6, ignore_eos=True), recorder.callback)
    drain(loop)
    assert recorder.final("plain").finish_reason == "stop" and recorder.tokens("plain") == [7, 7, EOS]
    assert recorder.final("min").finish_reason == "stop"
    assert recorder.tokens("min") == [7, 7, 1, 1, 1, EOS]  # EOS masked until 5 tokens exist
    assert recorder.final("ignore").finish_reason == "length" and EOS in recorder.tokens("ignore")


def test_submit_raises_queue_full_at_max_waiting() -> None:
    loop, _, recorder, _ = make_loop(SchedulerConfig(max_num_seqs=1, max_num_batched_tokens=8, max_waiting=2))
    loop.submit(request("a", [1], max_tokens=2), recorder.callback)
    loop.submit(request("b", [1], max_tokens=2), recorder.callback)
    with pytest.raises(QueueFullError, match="max_waiting"):
        loop.submit(request("c", [1], max_tokens=2), recorder.callback)
    loop.run_one_step()  # "a" runs: one waits
    loop.submit(request("c", [1], max_tokens=2), recorder.callback)


def test_submit_rejects_a_prompt_that_cannot_fit_max_model_len() -> None:
    loop, _, recorder, _ = make_loop(max_model_len=64)
    with pytest.raises(ValueError, match=r"context window \(max_model_len 64\); lower max_tokens to at most 4"):
        loop.submit(request("big", [1] * 60, max_tokens=10), recorder.callback)


def test_a_failing_callback_ends_only_its_own_request() -> None:
    loop, _, recorder, _ = make_loop()

    def broken(output: RequestOutput) -> None:
        recorder.callback(output)
        if not output.finished:
            raise ConnectionError("client went away")

    loop.submit(request("broken", [1, 2], max_tokens=6), broken)
    loop.submit(request("fine", [3, 4], max_tokens=6), recorder.callback)
    drain(loop)
    assert recorder.final("broken").finish_reason == "error"
    assert recorder.final("fine").finish_reason == "length" and len(recorder.tokens("fine")) == 6


def test_an_engine_failure_ends_that_steps_requests_with_an_error_and_the_loop_goes_on() -> None:
    loop, executor, recorder, _ = make_loop()
    loop.submit(request("unlucky", [1, 2], max_tokens=3), recorder.callback)
    executor.fail_next = True
    loop.run_one_step()
    assert recorder.final("unlucky").finish_reason == "error" and "injected" in recorder.final("unlucky").error
    loop.submit(request("next", [1, 2], max_tokens=3), recorder.callback)
    drain(loop)
    assert recorder.final("next").finish_reason == "length"


def test_the_thread_serves_requests_and_stop_ends_the_open_ones_with_an_error() -> None:
    executor = FakeExecutor()
    recorder = Recorder()
    loop = EngineLoop(executor, SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=32), FakeTokenizer(), recorder)
    loop.start()
    try:
        recorder.expected = 3
        for i in range(3):
            loop.submit(request(f"t{i}", [i + 1, 9], max_tokens=4), recorder.callback)
        assert recorder.done.wait(30)
        for i in range(3):
            assert recorder.tokens(f"t{i}") == reference_tokens([i + 1, 9], 4)
        endless = threading.Event()
        loop.submit(request("endless", [5], max_tokens=200, ignore_eos=True), lambda o: endless.set() if o.finished else None)
    finally:
        loop.stop(timeout_s=30)
    assert endless.is_set()
    with pytest.raises(RuntimeError, match="stopped"):
        loop.submit(request("late", [1], max_tokens=1), recorder.callback)


class ThreadRecordingExecutor(FakeExecutor):
    """A FakeExecutor that notes the thread it was built on and each thread a step ran on."""

    def __init__(self) -> None:
        super().__init__()
        self.built_on = threading.get_ident()
        self.stepped_on: set[int] = set()

    def execute(self, chunks):
        self.stepped_on.add(threading.get_ident())
        return super().execute(chunks)


def test_launch_builds_the_executor_on_the_thread_that_runs_every_step() -> None:
    built: list[ThreadRecordingExecutor] = []

    def make_executor() -> ThreadRecordingExecutor:
        built.append(ThreadRecordingExecutor())
        return built[0]

    recorder = Recorder()
    loop = EngineLoop.launch(make_executor, SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=32), FakeTokenizer(), recorder)
    try:
        recorder.expected = 2
        for i in range(2):
            loop.submit(request(f"l{i}", [i + 1, 7], max_tokens=5), recorder.callback)
        assert recorder.done.wait(30)
        assert recorder.tokens("l1") == reference_tokens([2, 7], 5)
    finally:
        loop.stop(timeout_s=30)
    executor = built[0]
    assert executor.built_on != threading.get_ident()
    assert executor.stepped_on == {executor.built_on}


def test_launch_raises_what_the_executor_build_raised() -> None:
    def broken() -> FakeExecutor:
        raise FileNotFoundError("no checkpoint in /nowhere")

    with pytest.raises(FileNotFoundError, match="no checkpoint in /nowhere"):
        EngineLoop.launch(broken, SchedulerConfig(), FakeTokenizer())


def test_a_failure_while_taking_a_request_in_still_ends_it_and_the_others_with_one_error_output() -> None:
    loop, _, recorder, _ = make_loop()

    def refuse(seq) -> None:
        raise RuntimeError("scheduler refused")

    loop.submit(request("open", [1, 2], max_tokens=50), recorder.callback)
    loop.run_one_step()
    loop.scheduler.add = refuse  # type: ignore[method-assign]
    recorder.expected = 2
    loop.submit(request("refused", [3, 4], max_tokens=5), recorder.callback)
    loop.start()  # its first step takes "refused" in, and the scheduler raises
    assert recorder.done.wait(30)
    loop.stop(timeout_s=30)
    assert recorder.final("open").finish_reason == "error" and recorder.final("refused").finish_reason == "error"


def test_the_loop_reproduces_the_engines_greedy_tokens_for_concurrent_requests() -> None:
    """The real engine on a tiny random Llama: concurrent requests, chunked prefills and
    preemptions on a tight KV cache give each request the tokens of transformers' greedy
    decoding of that request alone."""
    pytest.importorskip("transformers")
    import torch

    from tests.unit.tiny_llama import tiny_executor, tiny_hf_llama

    hf_model = tiny_hf_llama(randomise_norms=False)
    executor = tiny_executor(hf_model, num_blocks=16)
    assert executor.num_blocks == 16

    def greedy_alone(prompt: list[int], max_tokens: int) -> list[int]:
        tokens = list(prompt)
        with torch.no_grad():
            for _ in range(max_tokens):
                tokens.append(int(hf_model(torch.tensor([tokens])).logits[0, -1].argmax()))
        return tokens[len(prompt) :]

    recorder = Recorder()
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=16, long_prefill_token_threshold=8)
    loop = EngineLoop(executor, config, FakeTokenizer(), recorder)
    generator = torch.Generator().manual_seed(5)
    prompts = {f"p{i}": torch.randint(3, 97, (5 + 4 * i,), generator=generator).tolist() for i in range(5)}
    for request_id, prompt in prompts.items():
        loop.submit(request(request_id, prompt, max_tokens=14, ignore_eos=True), recorder.callback)
    drain(loop)
    assert sum(step.preemptions for step in recorder.steps) > 0, "precondition: the KV cache forced a preemption"
    assert max(step.decode_seqs for step in recorder.steps) > 1 and max(step.prefill_tokens for step in recorder.steps) > 0
    for request_id, prompt in prompts.items():
        assert recorder.tokens(request_id) == greedy_alone(prompt, 14), request_id
