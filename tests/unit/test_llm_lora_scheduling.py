"""Requests naming LoRA adapters in the scheduler and the loop: at most `max_loras` adapters
run at once without starving a rare one, a block computed under one adapter never serves
another, and an unknown adapter is refused by name."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from llm.contract import GenerationRequest, SamplingParams, SchedulerConfig
from llm.loop import EngineLoop
from llm.scheduler import Request, Scheduler
from tests.unit.llm_fakes import FakeExecutor, FakeTokenizer


def make_scheduler(max_loras: int, **options) -> Scheduler:
    config = SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=256, long_prefill_token_threshold=256, max_loras=max_loras, **options)
    return Scheduler(config, block_size=4, num_blocks=256, max_model_len=512)


def sequence(seq_id: int, adapter: str | None, prompt: list[int] | None = None) -> Request:
    params = SamplingParams(max_tokens=8, lora_name=adapter)
    request = GenerationRequest(f"r{seq_id}", prompt or [5, 6, 7, 8, 9], params, arrival_time=float(seq_id))
    return Request.from_request(seq_id, request, adapter_slot=-1 if adapter is None else ord(adapter[-1]) - ord("a"))


def running_adapters(scheduler: Scheduler) -> set[str]:
    return {seq.request.params.lora_name for seq in scheduler.running} - {None}


def test_at_most_max_loras_adapters_run_and_the_base_model_does_not_count() -> None:
    scheduler = make_scheduler(max_loras=2)
    for seq_id, adapter in enumerate(["lora-a", "lora-b", None, "lora-a", "lora-c", None]):
        scheduler.add(sequence(seq_id, adapter))
    plan = scheduler.schedule(now=10.0)
    assert running_adapters(scheduler) == {"lora-a", "lora-b"}
    # lora-c, the head that does not fit, blocks the queue: the base request behind it waits too
    assert [seq.seq_id for seq in plan.seqs] == [0, 1, 2, 3]
    assert [chunk.adapter_slot for chunk in plan.chunks] == [0, 1, -1, 0]


def test_a_rare_adapter_is_admitted_once_a_running_adapter_drains() -> None:
    scheduler = make_scheduler(max_loras=1)
    popular = [sequence(seq_id, "lora-a") for seq_id in range(3)]
    for seq in popular:
        scheduler.add(seq)
    scheduler.schedule(now=10.0)
    rare = sequence(3, "lora-b")
    scheduler.add(rare)
    scheduler.add(sequence(4, "lora-a"))  # arrives after the rare one: may not overtake it
    scheduler.schedule(now=11.0)
    assert rare not in scheduler.running and running_adapters(scheduler) == {"lora-a"}
    assert [seq.seq_id for seq in scheduler.running] == [0, 1, 2]
    for seq in popular:
        scheduler.finish(seq)
    scheduler.schedule(now=12.0)
    assert rare in scheduler.running and running_adapters(scheduler) == {"lora-b"}


def test_the_prefix_cache_never_hands_one_adapters_blocks_to_another() -> None:
    scheduler = make_scheduler(max_loras=4, enable_prefix_caching=True)
    prompt = list(range(10, 27))  # four full blocks and one token
    first = sequence(0, "lora-a", prompt)
    scheduler.add(first)
    plan = scheduler.schedule(now=1.0)
    scheduler.commit(plan, {first.seq_id: 3})
    for seq_id, adapter, hits in ((1, "lora-b", 0), (2, None, 0), (3, "lora-a", 16)):
        seq = sequence(seq_id, adapter, prompt)
        scheduler.add(seq)
        plan = scheduler.schedule(now=2.0 + seq_id)
        assert plan.prefix_cache_hits == hits, adapter
        scheduler.commit(plan, {s.seq_id: 3 for s in plan.sampled_seqs})


class AdapterExecutor(FakeExecutor):
    """The fake engine with two adapters resident."""

    def __init__(self) -> None:
        super().__init__()
        self.adapter_slots = {"lora-a": 0, "lora-b": 1}


def test_the_loop_passes_each_requests_slot_and_refuses_an_unknown_adapter_by_name() -> None:
    executor = AdapterExecutor()
    observed = SimpleNamespace(steps=[], finished=[])
    observer = SimpleNamespace(on_step=observed.steps.append, on_finished=observed.finished.append)
    loop = EngineLoop(executor, SchedulerConfig(), FakeTokenizer(), observer)
    finished = []
    for name in ("lora-b", None, "lora-a"):
        request = GenerationRequest(f"r-{name}", [5, 6, 7], SamplingParams(max_tokens=2, lora_name=name), 0.0)
        loop.submit(request, lambda output: finished.append(output) if output.finished else None)
    with pytest.raises(ValueError, match=r"unknown LoRA adapter 'lora-z' \(lora_name\); this model serves: lora-a, lora-b"):
        loop.submit(GenerationRequest("r-z", [5, 6, 7], SamplingParams(lora_name="lora-z"), 0.0), lambda output: None)
    while len(finished) < 3:
        loop.run_one_step(now=1.0)
    slots = {chunk.seq_id: chunk.adapter_slot for plan in executor.plans for chunk in plan}
    assert sorted(slots.values()) == [-1, 0, 1]
    # what the metrics read: the adapters running in each step, and each request's adapter
    assert observed.steps[0].running_adapters == ("lora-a", "lora-b") and observed.steps[0].max_loras == 4
    assert sorted(str(timings.lora_name) for timings in observed.finished) == ["None", "lora-a", "lora-b"]
