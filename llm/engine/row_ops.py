"""The forward's row-wise steps: RMSNorm (alone and after the residual add), SwiGLU's
silu(gate) * up, and the rotary embedding with the step's KV writes, as our fused C++
operators where they run (llm/engine/kernels/row_ops.cpp) or as torch's operators elsewhere.

At one decoding sequence a step is dispatch-bound: torch's RMSNorm plus the cast to the
compute dtype and the residual add are ~6 dispatches per norm, 61 norms a step, ~1.7 ms of a
10 ms int4 step on the Zen 4 EPYC; fused, each is one. Both implementations compute every row
alone, so a row's result never depends on the rest of its step.
"""

from __future__ import annotations

import logging
from typing import Protocol

import torch
import torch.nn.functional as F

from llm.engine.kernels.load import KernelUnavailable, load_kernels

logger = logging.getLogger(__name__)

FUSED_DTYPES = frozenset({torch.float32, torch.bfloat16})


class RowOps(Protocol):
    def norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm of the float32 rows `x` times `weight`, in the compute dtype."""

    def add_norm(self, x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """`x += delta` (the float32 residual, in place), then norm(x, weight)."""

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """silu(gate) * up for gate_up = [gate | up] along the last dimension."""

    def rotary_and_cache(
        self,
        qkv: torch.Tensor,
        positions: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        slots: torch.Tensor,
        k_slots: torch.Tensor,
        v_slots: torch.Tensor,
        qk_heads: int,
    ) -> torch.Tensor:
        """The query and key heads of `qkv` [rows, (qk_heads + kv_heads) * head_dim] rotated by the
        tables' rows at `positions` (cos and sign-folded sin [positions, head_dim]), as
        [rows, qk_heads, head_dim]; the rotated keys and the values are written into the layer's
        cache at `slots` (k_slots, v_slots [slots, kv_heads, head_dim])."""


class TorchRowOps:
    def __init__(self, dtype: torch.dtype, eps: float) -> None:
        self.dtype, self.eps = dtype, eps

    def norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), weight, self.eps).to(self.dtype)

    def add_norm(self, x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        x += delta  # in place: the float32 residual takes the product's dtype in
        return self.norm(x, weight)

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate).mul_(up)

    def rotary_and_cache(self, qkv, positions, cos, sin, slots, k_slots, v_slots, qk_heads: int) -> torch.Tensor:
        rows, (kv_heads, head_dim) = qkv.shape[0], k_slots.shape[1:]
        qk = qkv[:, : qk_heads * head_dim].view(rows, qk_heads, head_dim)
        qk = (qk * cos[positions][:, None, :]).addcmul_(qk.roll(head_dim // 2, dims=-1), sin[positions][:, None, :])  # halves swapped
        k_slots.index_copy_(0, slots, qk[:, qk_heads - kv_heads :])
        v_slots.index_copy_(0, slots, qkv[:, qk_heads * head_dim :].view(rows, kv_heads, head_dim))
        return qk


class FusedRowOps:
    """One torch.ops.llm_kernels call per step (the library must be loaded)."""

    def __init__(self, dtype: torch.dtype, eps: float) -> None:
        self.dtype, self.eps = dtype, eps
        self._ops = torch.ops.llm_kernels

    def norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty(x.shape, dtype=self.dtype, device=x.device)
        self._ops.rms_norm(x, weight, self.eps, out)
        return out

    def add_norm(self, x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        out = torch.empty(x.shape, dtype=self.dtype, device=x.device)
        self._ops.add_rms_norm(x, delta.contiguous(), weight, self.eps, out)
        return out

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate_up = gate_up.contiguous()
        out = torch.empty((gate_up.shape[0], gate_up.shape[1] // 2), dtype=gate_up.dtype, device=gate_up.device)
        self._ops.silu_mul(gate_up, out)
        return out

    def rotary_and_cache(self, qkv, positions, cos, sin, slots, k_slots, v_slots, qk_heads: int) -> torch.Tensor:
        qk = torch.empty((qkv.shape[0], qk_heads, k_slots.shape[2]), dtype=qkv.dtype, device=qkv.device)
        self._ops.rotary_cache_write(qkv.contiguous(), positions, cos, sin, slots, k_slots, v_slots, qk)
        return qk


def row_ops_for(device: torch.device, dtype: torch.dtype, eps: float, fused: bool = True) -> RowOps:
    """The fused operators where they can run (CPU, float32 or bfloat16, the library built),
    else torch's, saying why once."""
    if fused and dtype in FUSED_DTYPES:
        try:
            load_kernels("row_ops", device)
            return FusedRowOps(dtype, eps)
        except KernelUnavailable as error:
            if device.type == "cpu":
                logger.warning("row ops: torch's instead of the fused ones: %s", error)
    return TorchRowOps(dtype, eps)
