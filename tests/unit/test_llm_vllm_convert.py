"""vLLM's outputs and statistics as ours, with stand-ins of vLLM's objects (same attributes)."""

from __future__ import annotations

from types import SimpleNamespace

from llm.contract import SamplingParams
from llm.serving.request import ParsedRequest
from llm.serving.responses import ResponsePlan
from llm.vllm_engine.convert import OutputTracker, finished_timings, load_of, sampling_kwargs, step_stats, token_latencies


def vllm_output(text: str, ids: list[int], finished: bool = False, reason: str | None = None):
    return SimpleNamespace(outputs=[SimpleNamespace(text=text, token_ids=ids, finish_reason=reason)], finished=finished)


def test_sampling_keeps_every_key_the_request_parser_knows_except_ours() -> None:
    params = SamplingParams(max_tokens=7, temperature=0.5, top_k=3, seed=9, stop=("\n",), ignore_eos=True, min_tokens=2, priority=4)
    kwargs = sampling_kwargs(params)
    assert kwargs == {
        "max_tokens": 7,
        "temperature": 0.5,
        "top_p": 1.0,
        "top_k": 3,
        "seed": 9,
        "stop": ["\n"],
        "ignore_eos": True,
        "min_tokens": 2,
    }
    assert sampling_kwargs(SamplingParams())["stop"] is None


def test_delta_outputs_count_tokens_and_end_with_the_finish_reason() -> None:
    tracker = OutputTracker("r", num_prompt_tokens=5)
    first = tracker.convert(vllm_output(" Paris", [7]))
    last = tracker.convert(vllm_output(".", [8, 9], finished=True, reason="length"))
    assert (first.new_text, first.finished, first.finish_reason, first.num_output_tokens) == (" Paris", False, None, 1)
    assert (last.finished, last.finish_reason, last.num_output_tokens, last.num_prompt_tokens) == (True, "length", 3, 5)


def test_a_request_the_adapter_ends_is_planned_like_the_native_engines() -> None:
    parsed = ParsedRequest("Hi", SamplingParams(), stream=True, exclude_input_in_output=True)
    tracker = OutputTracker("r", 1)
    (cancelled,) = ResponsePlan(parsed).replies(tracker.ended("abort"))
    assert cancelled.final and cancelled.cancelled
    (expired,) = ResponsePlan(parsed).replies(tracker.ended("timeout", "queue timeout: no first token within queue_timeout_ms=300"))
    assert expired.overloaded and "server busy" in expired.error and "queue_timeout_ms=300" in expired.error


def scheduler_stats(details=None, usage: float = 0.25):
    prefix = SimpleNamespace(queries=32, hits=16)
    return SimpleNamespace(
        num_running_reqs=3, num_waiting_reqs=2, kv_cache_usage=usage, prefix_cache_stats=prefix, iteration_details=details
    )


def test_a_step_with_iteration_details_becomes_our_step_stats() -> None:
    details = SimpleNamespace(num_ctx_tokens=40, num_generation_requests=3, elapsed_ms=25.0)
    step = step_stats(scheduler_stats(details), SimpleNamespace(num_preempted_reqs=1), kv_blocks_total=100)
    assert (step.prefill_tokens, step.decode_seqs, step.duration_s) == (40, 3, 0.025)
    assert (step.running, step.waiting, step.kv_blocks_used, step.kv_blocks_total) == (3, 2, 25, 100)
    assert (step.preemptions, step.prefix_cache_queries, step.prefix_cache_hits) == (1, 32, 16)


def test_a_report_without_a_step_only_sets_the_load() -> None:
    assert step_stats(scheduler_stats(), None, 100) is None
    assert step_stats(None, None, 100) is None
    assert load_of(scheduler_stats(usage=0.5), 10) == (3, 2, 5, 10)
    assert load_of(None, 10) is None


def test_finished_requests_and_token_latencies() -> None:
    finished = SimpleNamespace(
        request_id="r", finish_reason="stop", queued_time=0.1, e2e_latency=2.0, num_prompt_tokens=9, num_generation_tokens=4
    )
    timings = finished_timings(finished)
    assert (timings.queue_s, timings.e2e_s, timings.ttft_s, timings.finish_reason) == (0.1, 2.0, None, "stop")
    assert (timings.prompt_tokens, timings.output_tokens) == (9, 4)
    iteration = SimpleNamespace(time_to_first_tokens_iter=[0.3], inter_token_latencies_iter=[0.05, 0.06])
    assert token_latencies(iteration) == ([0.3], [0.05, 0.06])
    assert token_latencies(None) == ((), ())
