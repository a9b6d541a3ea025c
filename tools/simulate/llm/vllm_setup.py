"""A vLLM config (configs/vllm.pbtxt's parameters) as the simulator's scheduler knobs and KV cache.

vLLM's knobs map onto our SchedulerConfig (tools/simulate/llm/vllm_policy.py says where the two
schedulers differ): iteration-level batching, no max-wait, the same budget, sequence cap and
policy, and long_prefill_token_threshold 0 (vLLM's "no cap") as the budget itself. The KV cache
is what vLLM allocates: `kv_cache_bytes` over the bytes of one block of `block_size` tokens in
the config's dtype, from the HF checkpoint's dimensions (1 GiB of bfloat16 SmolLM2 blocks of
128 tokens: 364, as vLLM reports).
"""

from __future__ import annotations

from collections.abc import Mapping

from llm.contract import SchedulerConfig
from llm.vllm_engine.knobs import VllmKnobs
from tools.simulate.llm.engine_sim import DTYPE_BYTES, EngineShape, kv_bytes_per_token


def vllm_scheduler_config(knobs: VllmKnobs) -> SchedulerConfig:
    return SchedulerConfig(
        mode="iteration",
        policy=knobs.policy,
        max_num_seqs=knobs.max_num_seqs,
        max_num_batched_tokens=knobs.max_num_batched_tokens,
        long_prefill_token_threshold=knobs.long_prefill_token_threshold or knobs.max_num_batched_tokens,
        max_wait_ms=0.0,
        max_waiting=knobs.max_waiting,
        enable_prefix_caching=knobs.enable_prefix_caching,
    )


def vllm_engine_shape(knobs: VllmKnobs, dims: Mapping) -> EngineShape:
    per_block = kv_bytes_per_token(dict(dims), DTYPE_BYTES[knobs.dtype]) * knobs.block_size
    return EngineShape(
        num_blocks=knobs.kv_cache_bytes // per_block,
        block_size=knobs.block_size,
        max_model_len=min(knobs.max_model_len, int(dims.get("max_position_embeddings", knobs.max_model_len))),
        policy="vllm",
    )


def vllm_simulation(parameters: Mapping[str, str], dims: Mapping) -> tuple[SchedulerConfig, EngineShape]:
    """What the simulator runs for a vLLM config's parameters (KnobError for a bad one)."""
    knobs = VllmKnobs.from_parameters(parameters)
    if not knobs.kv_cache_bytes:
        raise ValueError("kv_cache_bytes 0 lets vLLM size its cache from the device: give the simulator a size in bytes")
    return vllm_scheduler_config(knobs), vllm_engine_shape(knobs, dims)
