"""The Llama forward over one step's flat batch (Orca's selective batching).

Dense layers (norms, QKV, output projection, SwiGLU, head) see every token of every chunk at
once; attention runs per sequence against its own paged KV: all single-token chunks in one
call per layer (the paged kernel in place, or padded SDPA per group of similar lengths:
llm.engine.attention), each multi-token chunk in its own causal SDPA call. The residual
stream and the norms stay float32 whatever the weights' dtype (bf16 loses less that way).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from llm.engine.attention import PagedDecodeAttention
from llm.engine.checkpoint import LlamaDims, layer_key
from llm.engine.kv_cache import PagedKVCache
from llm.engine.linear import Linear, make_linear
from llm.engine.lora import LoraSlots
from llm.engine.row_ops import RowOps, row_ops_for
from llm.engine.step_plan import StepPlan


@dataclass(frozen=True)
class LayerWeights:
    attn_norm: torch.Tensor  # float32
    qkv: Linear  # hidden -> (heads + 2 kv_heads) * head_dim
    o: Linear
    mlp_norm: torch.Tensor  # float32
    gate_up: Linear  # hidden -> 2 * intermediate
    down: Linear


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where visible, -inf elsewhere: what SDPA turns a bool mask into on every call, made once
    per step instead of once per layer."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


class GatherBuffer:
    """The reused output of a per-layer block gather. A fresh multi-megabyte tensor per layer is
    a fresh mapping on the CPU (page faults on every touch); one buffer, grown when a step needs
    more, is written in place."""

    def __init__(self) -> None:
        self._buffer: torch.Tensor | None = None

    def gather(self, blocks: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """`blocks[index]` for a flat index, into the buffer (valid until the next gather)."""
        shape = (index.numel(), *blocks.shape[1:])
        size = index.numel() * blocks[0].numel()
        buffer = self._buffer
        if buffer is None or buffer.numel() < size or buffer.dtype != blocks.dtype or buffer.device != blocks.device:
            buffer = self._buffer = torch.empty(size, dtype=blocks.dtype, device=blocks.device)
        return torch.index_select(blocks, 0, index, out=buffer[:size].view(shape))


def rope_tables(dims: LlamaDims, length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sign-folded sin [length, head_dim] (HF's rotate_half convention), so rotating
    is x * cos + swap_halves(x) * sin with no negation per step."""
    half = dims.head_dim // 2
    inv_freq = 1.0 / (dims.rope_theta ** (torch.arange(0, dims.head_dim, 2, dtype=torch.int64).float() / dims.head_dim))
    freqs = torch.arange(length, dtype=torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    sin = emb.sin()
    sin[:, :half] = -sin[:, :half]
    return emb.cos().to(device), sin.to(device)


class LlamaModel:
    """Weights plus the forward; holds no per-request state (the KV cache is passed in).

    The projections and the head are in the `weights` format (llm.engine.linear), quantised here
    from the float checkpoint when it is not dense; the embedding lookup stays dense."""

    def __init__(
        self,
        dims: LlamaDims,
        tensors: Mapping[str, torch.Tensor],
        dtype: torch.dtype,
        device: torch.device,
        max_len: int,
        weights: str = "dense",
        prepack: bool = True,
        paged_attention: PagedDecodeAttention | None = None,
        fused_rows: bool = True,
        batch_invariant: bool = True,
        dense_kernel: str = "onednn",
    ) -> None:
        self.dims, self.dtype, self.device, self.weights = dims, dtype, device, weights
        self.paged_attention = paged_attention  # None: padded SDPA per decode group
        self.rows: RowOps = row_ops_for(device, dtype, dims.rms_norm_eps, fused_rows)  # norms, SwiGLU, rotary + KV writes

        def weight(name: str) -> Linear:
            return make_linear(tensors[name], weights, dtype, device, prepack, batch_invariant, dense_kernel)

        def norm(name: str) -> torch.Tensor:
            return tensors[name].to(device=device, dtype=torch.float32).contiguous()

        self.embed = tensors["embed.weight"].to(device=device, dtype=dtype).contiguous()
        if dims.tie_word_embeddings:  # dense: the head shares the embedding's tensor; quantised from the checkpoint's
            head = self.embed if weights == "dense" else tensors["embed.weight"]
        else:
            head = tensors["lm_head.weight"]
        self.lm_head = make_linear(head, weights, dtype, device, prepack, batch_invariant, dense_kernel)
        self.norm = norm("norm.weight")
        self.layers = [
            LayerWeights(
                attn_norm=norm(layer_key(i, "attn_norm.weight")),
                qkv=weight(layer_key(i, "qkv.weight")),
                o=weight(layer_key(i, "o.weight")),
                mlp_norm=norm(layer_key(i, "mlp_norm.weight")),
                gate_up=weight(layer_key(i, "gate_up.weight")),
                down=weight(layer_key(i, "down.weight")),
            )
            for i in range(dims.num_layers)
        ]
        cos, sin = rope_tables(dims, max_len, device)
        self.cos, self.sin = cos.to(dtype), sin.to(dtype)
        self._keys, self._values = GatherBuffer(), GatherBuffer()  # one engine thread runs forward()
        self.lora: LoraSlots | None = None  # resident adapters (LlamaExecutor.enable_lora)

    def forward(self, plan: StepPlan, cache: PagedKVCache) -> torch.Tensor:
        """Next-token logits [sample rows, vocabulary] (float32)."""
        dims = self.dims
        heads, kv_heads, head_dim = dims.num_heads, dims.num_kv_heads, dims.head_dim
        group = heads // kv_heads
        rows = plan.num_tokens
        qk_heads = heads + kv_heads
        x = self.embed[plan.token_ids].float()
        group_bias = [None if group.mask is None else additive_mask(group.mask, self.dtype) for group in plan.decode_groups]
        paged, scale = self.paged_attention, head_dim**-0.5
        span_bias = [None if span.mask is None else additive_mask(span.mask, self.dtype) for span in plan.prefills]
        rows_ops, last_layer = self.rows, len(self.layers) - 1
        lora, adapter_slots = self.lora, plan.adapter_slots
        if adapter_slots is not None and lora is None:
            raise ValueError("a chunk names a LoRA slot, but no adapters are enabled")

        def project(linear: Linear, projection: str, index: int, x: torch.Tensor) -> torch.Tensor:
            out = linear(x)
            if adapter_slots is not None:
                lora.add_delta(projection, index, x, out, adapter_slots)  # type: ignore[union-attr]
            return out

        h = rows_ops.norm(x, self.layers[0].attn_norm)
        for index, layer in enumerate(self.layers):
            qkv = project(layer.qkv, "qkv", index, h)
            qk = rows_ops.rotary_and_cache(
                qkv, plan.positions, self.cos, self.sin, plan.slots, cache.k_slots[index], cache.v_slots[index], qk_heads
            )  # the step's K and V are in the cache after this
            q, k = qk[:, :heads], qk[:, heads:]
            v = qkv[:, qk_heads * head_dim :].view(rows, kv_heads, head_dim)
            k_blocks, v_blocks = cache.k[index], cache.v[index]

            attn = torch.empty(rows, heads, head_dim, dtype=self.dtype, device=self.device)
            for decodes, bias in zip(plan.decode_groups, group_bias):
                # One query per sequence: its `group` query heads that share a KV head act as
                # `group` query rows of that head, so GQA needs no key expansion.
                n = decodes.hi - decodes.lo
                if paged is not None:  # in place from the cache: no gather, no padding
                    tables = decodes.blocks.view(n, -1)
                    paged(q[decodes.lo : decodes.hi], k_blocks, v_blocks, tables, decodes.lengths, scale, attn[decodes.lo : decodes.hi])
                    continue
                keys = self._keys.gather(k_blocks, decodes.blocks).view(n, -1, kv_heads, head_dim).transpose(1, 2)
                values = self._values.gather(v_blocks, decodes.blocks).view(n, -1, kv_heads, head_dim).transpose(1, 2)
                queries = q[decodes.lo : decodes.hi].reshape(n, kv_heads, group, head_dim)
                out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=bias)
                attn[decodes.lo : decodes.hi] = out.reshape(n, heads, head_dim)
            for span, bias in zip(plan.prefills, span_bias):
                queries = q[span.lo : span.hi].transpose(0, 1)[None]
                if span.blocks is None:
                    keys = k[span.lo : span.hi].transpose(0, 1)[None]
                    values = v[span.lo : span.hi].transpose(0, 1)[None]
                    out = F.scaled_dot_product_attention(queries, keys, values, is_causal=True, enable_gqa=True)
                else:
                    keys = self._keys.gather(k_blocks, span.blocks).view(-1, kv_heads, head_dim)[: span.kv_len].transpose(0, 1)[None]
                    values = self._values.gather(v_blocks, span.blocks).view(-1, kv_heads, head_dim)[: span.kv_len].transpose(0, 1)[None]
                    out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=bias, enable_gqa=True)
                attn[span.lo : span.hi] = out[0].transpose(0, 1)
            h = rows_ops.add_norm(x, project(layer.o, "o", index, attn.view(rows, heads * head_dim)), layer.mlp_norm)  # x += o(attn)
            mlp = project(layer.down, "down", index, rows_ops.silu_mul(project(layer.gate_up, "gate_up", index, h)))
            if index < last_layer:
                h = rows_ops.add_norm(x, mlp, self.layers[index + 1].attn_norm)
            else:
                x += mlp
        last = rows_ops.norm(x[plan.sample_rows], self.norm)
        return self.lm_head(last).float()
