"""`StepExecutor` for Llama checkpoints: weights, the paged KV cache and one forward per step."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from llm.adapters import ADAPTER_LIST, read_adapter_list
from llm.contract import EngineConfig, ScheduledChunk
from llm.engine.attention import resolve_attention
from llm.engine.checkpoint import LlamaDims, load_checkpoint
from llm.engine.compiled_decode import CompiledDecode, decode_inputs, is_decode_only
from llm.engine.kv_cache import PagedKVCache
from llm.engine.linear import resolve_dense_kernel
from llm.engine.lora import LoraSlots, read_adapters
from llm.engine.model import LlamaModel
from llm.engine.precision import DTYPES, resolve_dtype
from llm.engine.step_plan import build_plan, check_chunk
from llm.engine.threads import ThreadGovernor

log = logging.getLogger(__name__)


class LlamaExecutor:
    """Runs a step's chunks through the model; the scheduler owns which blocks are whose.
    `config` is the settings with `dtype` and `attention` resolved: what the engine runs and reports."""

    def __init__(self, dims: LlamaDims, tensors: Mapping[str, torch.Tensor], config: EngineConfig) -> None:
        config = dataclasses.replace(config, dtype=resolve_dtype(config.dtype, config.device))
        if config.dtype not in DTYPES:
            raise ValueError(f"dtype {config.dtype!r} is not one of {sorted(DTYPES)}")
        if config.num_threads > 0:
            torch.set_num_threads(config.num_threads)
        # the steps' thread count, when it adapts to the machine's load (None: fixed)
        self.thread_governor = ThreadGovernor(torch.get_num_threads(), self._set_threads) if config.adaptive_threads else None
        self.device = torch.device(config.device)
        self.dtype = DTYPES[config.dtype]
        attention, paged_kernel = resolve_attention(config.attention, self.device, self.dtype, dims.head_dim)
        dense_kernel = resolve_dense_kernel(config.dense_kernel, self.device, self.dtype, compiled=config.compile_decode)
        config = dataclasses.replace(config, attention=attention, dense_kernel=dense_kernel)
        self.dims, self.config = dims, config
        self.adapter_errors: dict[str, str] = {}  # LoRA adapters listed but not loaded: name -> reason
        self.max_model_len = min(config.max_model_len, dims.max_position_embeddings)
        # the compiled decode graph cannot take oneDNN-prepacked weights (llm.engine.linear.DenseLinear)
        self.model = LlamaModel(
            dims,
            tensors,
            self.dtype,
            self.device,
            self.max_model_len,
            config.weights,
            prepack=not config.compile_decode,
            paged_attention=paged_kernel,
            batch_invariant=config.batch_invariant,
            dense_kernel=dense_kernel,
        )
        self.cache = PagedKVCache(dims, config.block_size, config.kv_cache_bytes, self.dtype, self.device)
        self.block_size = config.block_size
        self.num_blocks = self.cache.num_blocks
        self.eos_token_ids = frozenset(dims.eos_token_ids)
        self.last_kv_tokens_attended = 0  # of the last step, for StepStats
        self.compiled_decode: CompiledDecode | None = None
        self.compile_seconds = 0.0  # the load's compile warm-up
        if config.compile_decode:
            self.compiled_decode = CompiledDecode(self.model, self.cache)
            self.compile_seconds = self.compiled_decode.warm_up(self.block_size)

    @classmethod
    def from_checkpoint(cls, folder: Path, config: EngineConfig) -> LlamaExecutor:
        """The checkpoint in `folder`, with the LoRA adapters its `multi_lora.json` lists."""
        dims, tensors = load_checkpoint(Path(folder))
        executor = cls(dims, tensors, config)
        adapter_list = Path(folder) / ADAPTER_LIST
        if adapter_list.is_file():
            executor.load_adapters(read_adapter_list(adapter_list))
        return executor

    def load_adapters(self, folders: Mapping[str, Path]) -> dict[str, str]:
        """One slot per listed adapter, all resident. An adapter that cannot be used is left out
        with its reason logged and returned (name -> reason); the others serve."""
        adapters, refused = read_adapters(folders, self.dims)
        slots = self.enable_lora(max(len(folders), 1), self.config.max_lora_rank)
        for slot, adapter in enumerate(adapters.values()):
            slots.load(slot, adapter)
        self.adapter_errors = refused
        return refused

    @property
    def adapter_slots(self) -> dict[str, int]:
        lora = self.model.lora
        return {} if lora is None else {name: slot for slot, name in enumerate(lora.names) if name is not None}

    def enable_lora(self, max_loras: int, max_lora_rank: int) -> LoraSlots:
        """Make `max_loras` adapter slots of rank up to `max_lora_rank`; chunks then name theirs
        (ScheduledChunk.adapter_slot), and a step mixes rows of any of them."""
        self.model.lora = LoraSlots(self.dims, max_loras, max_lora_rank, self.model.dtype, self.device)
        return self.model.lora

    @property
    def vocab_size(self) -> int:
        return self.dims.vocab_size

    def execute(self, chunks: Sequence[ScheduledChunk]) -> torch.Tensor:
        """Logits [chunks with sample=True, vocabulary] float32, in chunk order."""
        if self.thread_governor is None:
            return self._execute(chunks)
        tokens = sum(len(chunk.token_ids) for chunk in chunks)
        self.thread_governor.before_step(tokens)
        started = time.perf_counter()
        logits = self._execute(chunks)
        self.thread_governor.after_step(tokens, time.perf_counter() - started)
        return logits

    @staticmethod
    def _set_threads(count: int) -> None:
        torch.set_num_threads(count)
        log.debug("steps now run on %d intra-op thread(s)", count)

    def _execute(self, chunks: Sequence[ScheduledChunk]) -> torch.Tensor:
        if self.compiled_decode is not None and is_decode_only(chunks) and all(chunk.adapter_slot < 0 for chunk in chunks):
            for chunk in chunks:
                check_chunk(chunk, self.block_size, self.num_blocks, self.max_model_len)
            inputs = decode_inputs(chunks, self.block_size, self.device)
            self.last_kv_tokens_attended = inputs.kv_tokens_attended
            with torch.inference_mode():
                return self.compiled_decode(inputs)
        plan = build_plan(
            chunks, self.block_size, self.num_blocks, self.max_model_len, self.device, paged=self.model.paged_attention is not None
        )
        self.last_kv_tokens_attended = plan.kv_tokens_attended
        with torch.inference_mode():
            return self.model.forward(plan, self.cache)
