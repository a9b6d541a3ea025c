"""Between vLLM's objects and ours, field by field, with no vLLM import: the adapter hands in
vLLM's outputs and statistics (or anything with the same attributes: the unit tests' stand-ins).

Requests keep our SamplingParams (the vLLM backend's `sampling_parameters` keys, parsed and
checked by llm/serving/request.py); their outputs become our RequestOutput, so the replies are
planned by the same ResponsePlan as the native engine's; vLLM's per-step statistics become our
StepStats and RequestTimings, so LlmMetrics writes the same `vllm:*` families for both engines.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from llm.contract import RequestOutput, RequestTimings, SamplingParams, StepStats

FINISH_REASONS = {"stop": "stop", "length": "length", "abort": "abort", "error": "error", "repetition": "stop"}


def sampling_kwargs(params: SamplingParams) -> dict:
    """Keyword arguments of vllm.SamplingParams; `priority` and our queue_timeout_ms are not
    sampling (the adapter passes the first to generate() and enforces the second itself)."""
    return {
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k,  # 0 disables it in both
        "seed": params.seed,
        "stop": list(params.stop) or None,
        "ignore_eos": params.ignore_eos,
        "min_tokens": params.min_tokens,
    }


class OutputTracker:
    """One request's delta outputs from vLLM (RequestOutputKind.DELTA) as our RequestOutputs."""

    def __init__(self, request_id: str, num_prompt_tokens: int) -> None:
        self.request_id = request_id
        self.num_prompt_tokens = num_prompt_tokens
        self.num_output_tokens = 0

    def convert(self, output) -> RequestOutput:
        """`output`: a vllm RequestOutput of one completion (n = 1)."""
        completion = output.outputs[0]
        new_ids = list(completion.token_ids)
        self.num_output_tokens += len(new_ids)
        reason = str(completion.finish_reason) if completion.finish_reason is not None else None
        return RequestOutput(
            request_id=self.request_id,
            new_text=completion.text,
            new_token_ids=new_ids,
            finished=bool(output.finished),
            finish_reason=FINISH_REASONS.get(reason, reason) if output.finished else None,
            num_prompt_tokens=self.num_prompt_tokens,
            num_output_tokens=self.num_output_tokens,
        )

    def ended(self, reason: str, error: str | None = None) -> RequestOutput:
        """The final output of a request that vLLM did not finish itself (cancelled, expired, failed)."""
        return RequestOutput(self.request_id, "", (), True, reason, self.num_prompt_tokens, self.num_output_tokens, error=error)


def step_stats(scheduler_stats, iteration_stats, kv_blocks_total: int) -> StepStats | None:
    """Our StepStats from one executed step's vLLM statistics; None for a report without a step
    (no scheduler side, or no iteration details: a step that scheduled nothing). The composition
    comes from vLLM's iteration details (enable_logging_iteration_details): its context tokens
    are our prefill tokens, its generation requests our decodes."""
    details = getattr(scheduler_stats, "iteration_details", None)
    if details is None:
        return None
    prefix = scheduler_stats.prefix_cache_stats
    return StepStats(
        started=time.monotonic(),
        duration_s=details.elapsed_ms / 1000.0,
        prefill_tokens=details.num_ctx_tokens,
        decode_seqs=details.num_generation_requests,
        kv_tokens_attended=0,  # vLLM does not report it
        running=scheduler_stats.num_running_reqs,
        waiting=scheduler_stats.num_waiting_reqs,
        kv_blocks_used=round(scheduler_stats.kv_cache_usage * kv_blocks_total),
        kv_blocks_total=kv_blocks_total,
        preemptions=iteration_stats.num_preempted_reqs if iteration_stats is not None else 0,
        prefix_cache_queries=prefix.queries if prefix is not None else 0,
        prefix_cache_hits=prefix.hits if prefix is not None else 0,
    )


def load_of(scheduler_stats, kv_blocks_total: int) -> tuple[int, int, int, int] | None:
    """(running, waiting, KV blocks used, KV blocks) for LlmMetrics.set_load, or None."""
    if scheduler_stats is None:
        return None
    used = round(scheduler_stats.kv_cache_usage * kv_blocks_total)
    return scheduler_stats.num_running_reqs, scheduler_stats.num_waiting_reqs, used, kv_blocks_total


def finished_timings(finished) -> RequestTimings:
    """A vllm FinishedRequestStats as our RequestTimings. Its time to first token and gaps are
    observed per step instead (IterationStats), so they are left out here."""
    reason = str(finished.finish_reason).lower()
    return RequestTimings(
        request_id=str(finished.request_id or ""),
        queue_s=finished.queued_time,
        ttft_s=None,
        e2e_s=finished.e2e_latency,
        inter_token_s=(),
        prompt_tokens=finished.num_prompt_tokens,
        output_tokens=finished.num_generation_tokens,
        finish_reason=FINISH_REASONS.get(reason, reason),
    )


def token_latencies(iteration_stats) -> tuple[Sequence[float], Sequence[float]]:
    """(times to first token, inter-token gaps) observed in one step."""
    if iteration_stats is None:
        return (), ()
    return iteration_stats.time_to_first_tokens_iter, iteration_stats.inter_token_latencies_iter
