"""The server rejects requests beyond `max_waiting` (QueueFullError -> UNAVAILABLE): the bound
holds while a step runs, when the arrivals the step took in have already left the inbox."""

from __future__ import annotations

import pytest
import torch

from llm.contract import GenerationRequest, SamplingParams, SchedulerConfig
from llm.loop import EngineLoop, QueueFullError


class Tokens:
    def decode(self, ids, skip_special_tokens=True) -> str:
        return "x" * len(ids)


class SubmittingExecutor:
    """A fake engine that runs `during_step` inside its first step, as a request arriving then would."""

    block_size, num_blocks, max_model_len, eos_token_ids, adapter_slots = 16, 64, 256, frozenset({0}), {}

    def __init__(self) -> None:
        self.during_step = None

    def execute(self, chunks) -> torch.Tensor:
        if self.during_step is not None:
            action, self.during_step = self.during_step, None
            action()
        logits = torch.zeros(sum(chunk.sample for chunk in chunks), 8)
        logits[:, 1] = 1.0
        return logits


def request(name: str) -> GenerationRequest:
    return GenerationRequest(name, [1, 2, 3], SamplingParams(max_tokens=4, temperature=0), 0.0)


def test_the_waiting_bound_holds_for_arrivals_during_a_step() -> None:
    executor = SubmittingExecutor()
    loop = EngineLoop(executor, SchedulerConfig(max_num_seqs=1, max_waiting=2), Tokens())
    for name in ("running", "waiting-1"):
        loop.submit(request(name), lambda output: None)
    refused = []

    def arrive() -> None:
        loop.submit(request("waiting-2"), lambda output: None)  # two wait now: the bound
        with pytest.raises(QueueFullError, match="max_waiting"):
            loop.submit(request("one-too-many"), lambda output: None)
        refused.append(True)

    executor.during_step = arrive
    assert loop.run_one_step(now=0.0)
    assert refused == [True]
