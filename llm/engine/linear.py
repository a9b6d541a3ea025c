"""The weight formats of the engine's linear layers: dense, int8 and int4 (weight-only).

At one stream a decode step is bound by reading the weights (DESIGN.md: one row of a matmul is
memory-bound), so smaller weights make it faster. The quantised formats keep activations, the
residual stream, the norms and the KV cache in floating point: torch's weight-only CPU kernels
dequantise inside the matmul, so a row's result never depends on the other rows of its step (a
request's tokens stay independent of what shares its batch). Quantisation happens at load, from
the float checkpoint, with no randomness: the same checkpoint gives the same weights.
"""

from __future__ import annotations

import functools
import logging
from typing import Protocol

import torch
import torch.nn.functional as F

from llm.engine.kernels.load import KernelUnavailable, load_kernels

logger = logging.getLogger(__name__)

WEIGHT_FORMATS = ("dense", "int8", "int4")
INT4_GROUP = 32  # input columns per int4 scale and zero
INT4_ROWS = 16  # the int4 packing needs output rows in multiples of this (padded with zeros)


class Linear(Protocol):
    """y = x @ W.T for x [rows, in_features] in the compute dtype."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor: ...


class DenseLinear:
    """The weight in the compute dtype (the checkpoint's values, converted). On the CPU a
    bfloat16 weight is packed once at load for the product that runs it: our AMX kernel when
    `amx` (the dense_kernel knob; llm/engine/kernels/amx_linear.cpp: 1.2-2.1x oneDNN's speed
    from 1 to 32 rows, and every row's bits independent of the batch at any size), else
    oneDNN's blocked layout (decode steps 1.2-1.3x faster on the Zen 4 EPYC than reordering inside every
    product). float32 stays on the plain product (MKL's), where nothing was measured to gain.
    `prepack=False` for the compiled decode graph: inductor cannot lower oneDNN's product over
    a packed weight that is a graph input (and through an opaque custom op its logits came out
    wrong)."""

    def __init__(
        self,
        weight: torch.Tensor,
        dtype: torch.dtype,
        device: torch.device,
        prepack: bool = True,
        batch_invariant: bool = True,
        amx: bool = False,
    ) -> None:
        weight = weight.to(device=device, dtype=dtype).contiguous()
        self.weight: torch.Tensor | None = weight
        # rows per product: INVARIANT_BLOCK keeps each row's bits whatever the batch; otherwise all at once
        self.block = INVARIANT_BLOCK if batch_invariant else None
        self.packed: torch.Tensor | None = None  # oneDNN's layout
        self.amx_packed: torch.Tensor | None = None  # ours (amx_linear.cpp)
        if prepack and amx and amx_fits(weight, dtype):
            self.amx_packed, self.weight = torch.ops.llm_kernels.amx_pack(weight), None
        elif prepack and prepacks(dtype, device):
            self.packed, self.weight = torch.ops.mkldnn._reorder_linear_weight(weight, PREPACK_ROWS), None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.amx_packed is not None:
            return torch.ops.llm_kernels.amx_linear(x if x.stride(-1) == 1 else x.contiguous(), self.amx_packed)
        if self.packed is None:
            return F.linear(x, self.weight)
        rows, block = x.shape[0], self.block
        if block is None:
            return self._product(x, padded=False)
        if rows <= block:
            return self._product(x)
        return torch.cat([self._product(x[start : start + block]) for start in range(0, rows, block)])

    def _product(self, x: torch.Tensor, padded: bool = True) -> torch.Tensor:
        """oneDNN's product, its rows `padded` to INVARIANT_ROWS so a row's bits do not depend
        on how many share it. Unpadded without batch invariance: the pad's copy and fill were
        ~4 ms of a 15-sequence decode step (0.87x its time without them, six paired rounds)."""
        rows = x.shape[0]
        pad = -rows % INVARIANT_ROWS if padded else 0
        if pad:
            x = F.pad(x, (0, 0, 0, pad))
        out = torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")
        return out[:rows] if pad else out


PREPACK_ROWS = 16  # the row count oneDNN's packing is tuned for (any count runs)
# oneDNN's bfloat16 product handles a batch's last rows modulo 16 with other code, which sums in
# another order: on the Zen 4 EPYC the [576 x 1536] down projection gave a row other bits in 72 of
# 95 batch sizes than alone (the other projections in none), so a seeded sample changed when
# another stream decoded beside it. Padded with zero rows to a multiple of 16, every row's bits
# were the same alone and in batches of 2-320 rows (int8 and int4 products were already).
INVARIANT_ROWS = 16
# On the AMX Xeon (Sapphire Rapids class, 2 threads) oneDNN sums in one order for up to 32 rows
# and in another from 48 rows: a row's bits changed in every batch of more than 32 rows. Products
# of more rows run as blocks of 32, each padded as above (docs/decisions/llm-bf16-invariant-rows.md).
INVARIANT_BLOCK = 32


# The dense_kernel knob: which product runs dense bfloat16 weights on the CPU.
DENSE_KERNELS = ("auto", "amx", "onednn")
AMX_COLUMNS, AMX_DEPTH = 16, 32  # the packing's multiples: output features, input features


@functools.cache
def amx_unavailable(device: torch.device) -> str | None:
    """Why our AMX product cannot run on `device` (None: it can): the CPU lacks AMX, Linux
    refuses the tile state, or the kernel library does not build."""
    if device.type != "cpu":
        return f"it runs on the CPU, not {device}"
    try:
        load_kernels("amx_linear", device)
    except KernelUnavailable as error:
        return str(error)
    if not torch.ops.llm_kernels.amx_available():
        return "this CPU has no AMX bfloat16 products (amx-tile, amx-bf16), or Linux does not let this process use them"
    return None


def resolve_dense_kernel(choice: str, device: torch.device, dtype: torch.dtype, compiled: bool = False) -> str:
    """`amx` or `onednn` for the dense_kernel knob's value. `auto` takes ours where it runs
    (bfloat16 on a CPU with AMX, eager steps) and torch's elsewhere; an explicit `amx` that
    cannot run raises KernelUnavailable naming why. `compiled`: the decode runs as one compiled
    graph, whose products are torch's."""
    if choice not in DENSE_KERNELS:
        raise ValueError(f"dense_kernel {choice!r} is not one of {list(DENSE_KERNELS)}")
    if choice == "onednn":
        return "onednn"
    why = (
        "the compiled decode graph runs torch's products"
        if compiled
        else f"it takes bfloat16 weights, not {dtype}"
        if dtype != torch.bfloat16
        else amx_unavailable(device)
    )
    if why is None:
        return "amx"
    if choice == "amx":
        raise KernelUnavailable(f"dense_kernel amx cannot run: {why}")
    if dtype == torch.bfloat16 and not compiled:
        logger.info("dense_kernel: auto takes oneDNN's products: %s", why)
    return "onednn"


def amx_fits(weight: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether our AMX product takes `weight` [out, in]: bfloat16 in a shape the packing takes
    (other layers of the model stay on oneDNN)."""
    rows, columns = weight.shape
    return dtype == torch.bfloat16 and rows % AMX_COLUMNS == 0 and columns % AMX_DEPTH == 0


def prepacks(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether DenseLinear prepacks: bfloat16 on a CPU with oneDNN."""
    return dtype == torch.bfloat16 and device.type == "cpu" and torch.backends.mkldnn.is_available()


def quantise_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric, one scale per output row: (q int8 [N, K] in [-127, 127], scales float32 [N]);
    w ~ q * scale."""
    w = weight.float()
    scales = w.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny) / 127
    return torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8), scales


def quantise_int4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric per group of 32 input columns, rows zero-padded to a multiple of 16:
    (q int32 [N', K] in [0, 15], scale and zero float32 [N', K / 32]); w ~ (q - 8) * scale + zero
    (torch's int4pack convention, so zero = min + 8 * scale)."""
    rows, columns = weight.shape
    if columns % INT4_GROUP:
        raise ValueError(f"int4 weights need input widths divisible by {INT4_GROUP}; this matrix is {rows} x {columns}")
    padded = -(-rows // INT4_ROWS) * INT4_ROWS
    w = torch.zeros(padded, columns, dtype=torch.float32)
    w[:rows] = weight.float()
    groups = w.view(padded, columns // INT4_GROUP, INT4_GROUP)
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)
    scale = ((high - low) / 15).clamp(min=torch.finfo(torch.float32).tiny)
    q = torch.round((groups - low[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32)
    return q.view(padded, columns), scale, low + 8 * scale


# The quantised kernels always take bfloat16 activations, whatever the engine's dtype: with float32
# ones torch 2.13's kernels ran 3-4x (int8) and 8-35x (int4) slower on the AMX Xeon (one quiet
# run: a decode step of 16 sequences 820 ms against 85 ms for int8), and bfloat16 is what the
# export's gate checks these formats with (llm.artifacts.GATED_FORMATS).
KERNEL_DTYPE = torch.bfloat16


class Int8Linear:
    """int8 weights (quantise_int8) through torch's weight-only kernel."""

    def __init__(self, weight: torch.Tensor, dtype: torch.dtype, device: torch.device) -> None:
        q, scales = quantise_int8(weight)
        self.qweight = q.to(device).contiguous()
        self.scales = scales.to(device=device, dtype=KERNEL_DTYPE)  # the kernel wants them in the activations' dtype

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int8pack_mm(x.to(KERNEL_DTYPE), self.qweight, self.scales).to(x.dtype)


class Int4Linear:
    """int4 weights (quantise_int4) packed for torch's CPU kernel; the padded rows are cut off."""

    def __init__(self, weight: torch.Tensor, dtype: torch.dtype, device: torch.device) -> None:
        self.out_features = weight.shape[0]
        q, scale, zero = quantise_int4(weight)
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1).to(device)
        # [K / 32, N', 2]: the kernel's layout
        self.scale_and_zeros = torch.stack((scale, zero), dim=-1).transpose(0, 1).contiguous().to(device=device, dtype=KERNEL_DTYPE)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(x.to(KERNEL_DTYPE), self.packed, INT4_GROUP, self.scale_and_zeros)
        out = out if out.shape[-1] == self.out_features else out[:, : self.out_features]
        return out.to(x.dtype)


FORMATS: dict[str, type[DenseLinear] | type[Int8Linear] | type[Int4Linear]] = {
    "dense": DenseLinear,
    "int8": Int8Linear,
    "int4": Int4Linear,
}


def make_linear(
    weight: torch.Tensor,
    weights: str,
    dtype: torch.dtype,
    device: torch.device,
    prepack: bool = True,
    batch_invariant: bool = True,
    dense_kernel: str = "onednn",
) -> Linear:
    """A linear layer over `weight` [out, in] in format `weights` (one of WEIGHT_FORMATS);
    `prepack`: whether a dense one may be packed at load; `batch_invariant`: whether its products
    keep each row's bits whatever the batch (DenseLinear; the quantised kernels and ours do);
    `dense_kernel`: a resolved dense_kernel (resolve_dense_kernel), `amx` or `onednn`."""
    if weights not in FORMATS:
        raise ValueError(f"weights {weights!r} is not one of {', '.join(WEIGHT_FORMATS)}")
    if weights != "dense" and device.type != "cpu":
        raise ValueError(f"weights {weights!r} runs on the CPU only (torch's weight-only kernels); use weights dense on {device.type}")
    if weights == "dense":
        return DenseLinear(weight, dtype, device, prepack, batch_invariant, amx=dense_kernel == "amx")
    return FORMATS[weights](weight, dtype, device)
