"""What NVIDIA's Triton vLLM backend (the `vllm` backend of the vllm-gpu variant) writes on
Triton's metrics port: the families of its src/utils/metrics.py (triton-inference-server/
vllm_backend, main after the 25.12 release), labelled model and version as llm/metrics.py
labels ours, and only with the model parameter REPORT_CUSTOM_METRICS "true" and vLLM's log
stats on (`disable_log_stats: false` in model.json)."""

from __future__ import annotations

NVIDIA_VLLM_FAMILIES = frozenset(
    {
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds",
        "vllm:time_per_output_token_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_prompt_tokens",
        "vllm:request_generation_tokens",
        "vllm:request_params_n",
    }
)
# Its name -> ours, for a family both write under different names (the same gaps between a
# stream's tokens: vLLM's V1 iteration stats, inter_token_latencies_iter, in both).
NVIDIA_ALIASES = {"vllm:time_per_output_token_seconds": "vllm:inter_token_latency_seconds"}
REPORT_METRICS_PARAMETER = "REPORT_CUSTOM_METRICS"
