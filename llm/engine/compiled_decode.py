"""A decode-only step as one graph compiled by torch.compile (inductor), for the `compile_decode` knob.

At one sequence most of an eager decode step is not arithmetic: ~900 operator dispatches, each a
few microseconds of Python and dispatcher, for norms, rotary, KV writes and attention over a
handful of rows. Inductor fuses the elementwise work into a few generated C++ loops and leaves
the products and attention to their kernels. Only steps whose chunks are all single tokens take
this path (prefill chunks run the eager forward): their shapes vary in two sizes only, the
number of sequences and the blocks of the longest context, both symbolic in the graph.

The KV cache is written outside the graph: an in-place write to a graph input makes inductor copy
the whole cache back each step. The graph writes each layer's new K and V into its gathered copy
of the sequence's keys instead, returns all layers' K and V, and the caller stores them with one
index_copy_ per tensor.
"""

from __future__ import annotations

import locale
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from llm.contract import ScheduledChunk
from llm.engine.kv_cache import PagedKVCache
from llm.engine.model import LlamaModel

logger = logging.getLogger(__name__)

# The graph is compiled for symbolic sizes, but torch specialises sizes 0 and 1 and gives equal
# sizes one symbol: warming up with one and with two sequences over three blocks covers every
# later step, provided no step has fewer blocks than this (shorter contexts are padded to it).
MIN_BLOCKS = 3


UTF8_LOCALES = ("C.UTF-8", "C.utf8", "en_US.UTF-8")


def use_utf8_files() -> None:
    """Make files opened without an encoding read as UTF-8: inductor opens its code templates
    so, and the Python backend's stub embeds an interpreter whose locale stays "C" (ASCII)
    whatever LANG says, so compiling failed to load in Triton (UnicodeDecodeError in
    torch/_inductor/utils.py load_template). Sets the process's LC_CTYPE when it is not UTF-8."""
    if locale.getpreferredencoding(False).lower().replace("-", "") == "utf8":
        return
    for name in UTF8_LOCALES:
        try:
            locale.setlocale(locale.LC_CTYPE, name)
            return
        except locale.Error:
            continue
    logger.warning("no UTF-8 locale (%s) could be set: torch.compile may fail to read its templates", ", ".join(UTF8_LOCALES))


@dataclass(frozen=True)
class DecodeInputs:
    """One decode-only step's tensors, rows in chunk order."""

    token_ids: torch.Tensor  # [n]
    positions: torch.Tensor  # [n] the position of each new token (its context length - 1)
    slots: torch.Tensor  # [n] where its K and V go (block * block_size + offset)
    blocks: torch.Tensor  # [n, width] block tables, padded with block 0 (masked)
    sample_rows: torch.Tensor  # [s] rows whose logits the step returns
    kv_tokens_attended: int


def is_decode_only(chunks: Sequence[ScheduledChunk]) -> bool:
    return bool(chunks) and all(len(chunk.token_ids) == 1 for chunk in chunks)


def decode_inputs(chunks: Sequence[ScheduledChunk], block_size: int, device: torch.device) -> DecodeInputs:
    """The tensors of a decode-only step (chunks already checked by step_plan's rules)."""
    positions = [chunk.start_position for chunk in chunks]
    width = max(MIN_BLOCKS, max(position // block_size + 1 for position in positions))
    tables = [list(chunk.block_table[:width]) + [0] * (width - len(chunk.block_table[:width])) for chunk in chunks]
    slots = [chunk.block_table[p // block_size] * block_size + p % block_size for chunk, p in zip(chunks, positions)]

    def tensor(values: list) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long).to(device, non_blocking=True)

    # Inference tensors always: the graph is guarded on its inputs' dispatch keys, and a tensor made
    # outside inference mode (one more key) made every real step after the load's warm-up recompile.
    with torch.inference_mode():
        return DecodeInputs(
            token_ids=tensor([chunk.token_ids[0] for chunk in chunks]),
            positions=tensor(positions),
            slots=tensor(slots),
            blocks=tensor(tables),
            sample_rows=tensor([i for i, chunk in enumerate(chunks) if chunk.sample]),
            kv_tokens_attended=sum(p + 1 for p in positions),
        )


class CompiledDecode:
    """The model's decode step compiled once per engine; call with DecodeInputs."""

    def __init__(self, model: LlamaModel, cache: PagedKVCache) -> None:
        self.model, self.cache = model, cache
        use_utf8_files()
        # The cache's sizes are fixed. Left dynamic, a cache dimension equal to a step's size at the
        # warm-up shares its symbol (SmolLM2's 3 KV heads and the warm-up's 3 blocks), and the graph
        # then holds only for steps of exactly that size: every wider step recompiled.
        torch._dynamo.mark_static(cache.k)
        torch._dynamo.mark_static(cache.v)
        self._graph = torch.compile(self._forward, dynamic=True, fullgraph=True)

    def _forward(
        self, token_ids: torch.Tensor, positions: torch.Tensor, blocks: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logits [n, vocabulary] float32, K and V [layers, n, kv_heads, head_dim]) of one decode step."""
        model, dims = self.model, self.model.dims
        heads, kv_heads, head_dim, half = dims.num_heads, dims.num_kv_heads, dims.head_dim, dims.head_dim // 2
        qk_heads = heads + kv_heads
        n, width = blocks.shape
        keys_per_seq = width * k_cache.shape[2]
        visible = torch.arange(keys_per_seq, device=blocks.device)[None, :] <= positions[:, None]
        mask = visible[:, None, None, :]
        new_rows = torch.arange(n, device=blocks.device) * keys_per_seq + positions  # each token's row in the gathered keys
        flat_blocks = blocks.reshape(-1)
        cos, sin = model.cos[positions][:, None, :], model.sin[positions][:, None, :]
        x = model.embed[token_ids].float()
        new_k, new_v = [], []
        for index, layer in enumerate(model.layers):
            qkv = layer.qkv(self._norm(x, layer.attn_norm))
            qk = qkv[:, : qk_heads * head_dim].view(n, qk_heads, head_dim)
            qk = qk * cos + qk.roll(half, dims=-1) * sin
            q, k = qk[:, :heads], qk[:, heads:]
            v = qkv[:, qk_heads * head_dim :].view(n, kv_heads, head_dim)
            new_k.append(k)
            new_v.append(v)
            keys = k_cache[index][flat_blocks].view(-1, kv_heads, head_dim).index_copy(0, new_rows, k)
            values = v_cache[index][flat_blocks].view(-1, kv_heads, head_dim).index_copy(0, new_rows, v)
            keys = keys.view(n, keys_per_seq, kv_heads, head_dim).transpose(1, 2)
            values = values.view(n, keys_per_seq, kv_heads, head_dim).transpose(1, 2)
            queries = q.reshape(n, kv_heads, heads // kv_heads, head_dim)  # GQA as query rows of each KV head
            out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask)
            x = x + layer.o(out.reshape(n, heads * head_dim))
            gate, up = layer.gate_up(self._norm(x, layer.mlp_norm)).chunk(2, dim=-1)
            x = x + layer.down(F.silu(gate) * up)
        logits = model.lm_head(self._norm(x, model.norm)).float()
        return logits, torch.stack(new_k), torch.stack(new_v)

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), weight, self.model.dims.rms_norm_eps).to(self.model.dtype)

    def __call__(self, inputs: DecodeInputs) -> torch.Tensor:
        """Logits [sampled rows, vocabulary] float32; the step's K and V are in the cache after."""
        cache = self.cache
        logits, k, v = self._graph(inputs.token_ids, inputs.positions, inputs.blocks, cache.k, cache.v)
        cache.k_slots.index_copy_(1, inputs.slots, k)
        cache.v_slots.index_copy_(1, inputs.slots, v)
        return logits if inputs.sample_rows.numel() == logits.shape[0] else logits[inputs.sample_rows]

    def warm_up(self, block_size: int) -> float:
        """Compile for one and for several sequences now (minutes on a cold inductor cache, seconds
        from its on-disk cache) rather than inside the first requests' steps; seconds taken. The
        warm-up writes K and V into block 0 only, which holds nothing until the scheduler hands it out."""
        started = time.perf_counter()
        for n in (1, 2):
            chunks = [ScheduledChunk(i, [0], MIN_BLOCKS * block_size - 1, (0,) * MIN_BLOCKS, True) for i in range(n)]
            what = "one sequence" if n == 1 else "several"
            logger.info("compiling the decode step for %s (cached on disk by torch for later loads)", what)
            with torch.inference_mode():
                self(decode_inputs(chunks, block_size, self.model.device))
        return time.perf_counter() - started
