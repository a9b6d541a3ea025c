"""The live channel for the LLM's step limits: Scheduler.set_step_limits and
EngineLoop.update_config change the token budget and max-wait between steps, without
dropping or restarting a running stream."""

from __future__ import annotations

import pytest

from llm.contract import SchedulerConfig
from llm.scheduler import Request, Scheduler
from tests.unit.test_llm_loop import drain, make_loop, request


def test_set_step_limits_changes_the_budget_of_the_next_step_only():
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64), block_size=4, num_blocks=64, max_model_len=256)

    scheduler.add(Request.from_request(0, request("a", list(range(1, 101)))))
    assert scheduler.schedule(0.0).prefill_tokens == 64
    scheduler.set_step_limits(max_num_batched_tokens=16)
    assert scheduler.schedule(0.0).prefill_tokens == 16


def test_step_limits_refuse_other_knobs_and_a_budget_below_max_num_seqs():
    config = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64)
    with pytest.raises(ValueError, match="change live"):
        Scheduler.with_step_limits(config, max_num_seqs=2)
    with pytest.raises(ValueError, match="at least max_num_seqs"):
        Scheduler.with_step_limits(config, max_num_batched_tokens=4)
    with pytest.raises(ValueError, match="negative"):
        Scheduler.with_step_limits(config, max_wait_ms=-1)
    assert Scheduler.with_step_limits(config, max_wait_ms=5).max_wait_ms == 5


def test_update_config_applies_between_steps_and_the_running_stream_finishes_whole():
    loop, _, recorder, _ = make_loop(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=32))
    recorder.expected = 1
    loop.submit(request("a", list(range(1, 81)), max_tokens=6, ignore_eos=True), recorder.callback)
    loop.run_one_step()
    assert recorder.steps[-1].prefill_tokens == 32
    applied = loop.update_config(max_num_batched_tokens=8)
    assert applied.max_num_batched_tokens == 8 and loop.config.max_num_batched_tokens == 8
    loop.run_one_step()
    assert recorder.steps[-1].prefill_tokens == 8
    drain(loop)
    final = recorder.final("a")
    assert final.finish_reason == "length" and len(recorder.tokens("a")) == 6


def test_update_config_with_a_bad_value_changes_nothing():
    loop, _, _, _ = make_loop(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=32))
    with pytest.raises(ValueError):
        loop.update_config(max_num_batched_tokens=2)
    loop.run_one_step()
    assert loop.scheduler.config.max_num_batched_tokens == 32
