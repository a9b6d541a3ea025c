"""Low-rank adapters (LoRA) in PEFT's format, held in slots so one step serves several.

An adapter adds `scale * B @ A` to some of the base projections (PEFT: `lora_A` [rank, in],
`lora_B` [out, rank], `scale = lora_alpha / rank`, or `/ sqrt(rank)` with rsLoRA). Our
projections fuse q, k and v (and gate and up) into one product, so an adapter's parts are
fused too: their A matrices stacked (rank per part), their B matrices placed block-diagonally,
a part the adapter leaves alone all zeros. The base product runs once over every row of a step;
`LoraSlots.add_delta` then adds each row's own adapter's delta (the `lora_delta` kernel, or
torch per slot where the kernel cannot run), so requests for different adapters share a step.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from llm.adapters import AdapterError
from llm.engine.checkpoint import LlamaDims

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
log = logging.getLogger("llm.engine.lora")
NO_ADAPTER = -1  # a row's slot when its request names no adapter

# Our fused projections and, in order, the HF modules whose outputs they stack.
PROJECTIONS: dict[str, tuple[str, ...]] = {
    "qkv": ("q_proj", "k_proj", "v_proj"),
    "o": ("o_proj",),
    "gate_up": ("gate_proj", "up_proj"),
    "down": ("down_proj",),
}
MODULES = {module: projection for projection, modules in PROJECTIONS.items() for module in modules}
_KEY = re.compile(r"layers\.(\d+)\.(?:self_attn|mlp)\.(\w+_proj)\.lora_([AB])\.weight$")


def module_widths(dims: LlamaDims) -> dict[str, tuple[int, int]]:
    """(in, out) of every HF module an adapter may target."""
    hidden, inter, head = dims.hidden_size, dims.intermediate_size, dims.head_dim
    return {
        "q_proj": (hidden, dims.num_heads * head),
        "k_proj": (hidden, dims.num_kv_heads * head),
        "v_proj": (hidden, dims.num_kv_heads * head),
        "o_proj": (dims.num_heads * head, hidden),
        "gate_proj": (hidden, inter),
        "up_proj": (hidden, inter),
        "down_proj": (inter, hidden),
    }


@dataclass(frozen=True)
class Adapter:
    """One adapter's matrices, per (layer, HF module): (A [rank, in], B [out, rank]), float32."""

    name: str
    rank: int
    scale: float
    matrices: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]

    @classmethod
    def from_peft(cls, name: str, folder: Path, dims: LlamaDims) -> Adapter:
        """Read PEFT's `adapter_config.json` and `adapter_model.safetensors` from `folder`."""
        from safetensors.torch import load_file

        config_path, weights_path = folder / CONFIG_NAME, folder / WEIGHTS_NAME
        for path in (config_path, weights_path):
            if not path.is_file():
                raise AdapterError(f"adapter {name!r}: no {path.name} in {folder}")
        try:
            config = json.loads(config_path.read_text())
            rank, alpha = int(config["r"]), float(config.get("lora_alpha", config["r"]))
        except (ValueError, KeyError, TypeError) as error:
            raise AdapterError(f"adapter {name!r}: {config_path} is not a LoRA config ({error})") from error
        if config.get("peft_type", "LORA") != "LORA":
            raise AdapterError(f"adapter {name!r}: peft_type {config.get('peft_type')!r}, only LORA is served")
        if config.get("bias", "none") != "none" or config.get("use_dora") or config.get("fan_in_fan_out"):
            raise AdapterError(f"adapter {name!r}: bias, DoRA and fan_in_fan_out adapters are not served")
        if rank < 1:
            raise AdapterError(f"adapter {name!r}: rank {rank} must be at least 1")
        scale = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
        try:
            tensors = load_file(str(weights_path))
        except Exception as error:  # safetensors raises its own error types for a damaged file
            raise AdapterError(f"adapter {name!r}: cannot read {weights_path}: {error}") from error
        return cls(name, rank, scale, _matrices(name, tensors, rank, dims))


def read_adapters(folders: Mapping[str, Path], dims: LlamaDims) -> tuple[dict[str, Adapter], dict[str, str]]:
    """The listed adapters this model can use, by name, and the others' reasons (name -> why),
    each logged: one bad adapter leaves the rest serving, on either engine."""
    usable: dict[str, Adapter] = {}
    refused: dict[str, str] = {}
    for name, folder in folders.items():
        try:
            usable[name] = Adapter.from_peft(name, folder, dims)
        except AdapterError as error:
            refused[name] = str(error)
            log.error("LoRA adapter not loaded, the others serve: %s", error)
    return usable, refused


def _matrices(name: str, tensors: dict[str, torch.Tensor], rank: int, dims: LlamaDims) -> dict:
    widths = module_widths(dims)
    halves: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        match = _KEY.search(key)
        if match is None:
            raise AdapterError(f"adapter {name!r}: tensor {key!r} is not a LoRA A or B of a known projection")
        layer, module, half = int(match[1]), match[2], match[3]
        if module not in widths or not 0 <= layer < dims.num_layers:
            raise AdapterError(f"adapter {name!r}: tensor {key!r} targets no projection of this model")
        halves.setdefault((layer, module), {})[half] = tensor.float()
    if not halves:
        raise AdapterError(f"adapter {name!r}: no LoRA tensors")
    matrices = {}
    for (layer, module), pair in sorted(halves.items()):
        width_in, width_out = widths[module]
        a, b = pair.get("A"), pair.get("B")
        if a is None or b is None:
            raise AdapterError(f"adapter {name!r}: layer {layer} {module} has lora_A or lora_B missing")
        if tuple(a.shape) != (rank, width_in) or tuple(b.shape) != (width_out, rank):
            raise AdapterError(
                f"adapter {name!r}: layer {layer} {module} has A {tuple(a.shape)} and B {tuple(b.shape)}, "
                f"this model needs ({rank}, {width_in}) and ({width_out}, {rank})"
            )
        matrices[(layer, module)] = (a, b)
    return matrices


class LoraSlots:
    """`max_loras` adapters resident at once, stacked per layer and projection so one kernel
    call per projection serves every row of a step whatever its adapter, in the step's dtype
    (a decode step with many adapters reads all their matrices: as narrow as the base weights).
    A fused projection's parts keep their own rank columns (`part_ends`), so a q-only adapter
    costs no k and v work and no block-diagonal zeros are stored or read."""

    def __init__(self, dims: LlamaDims, max_loras: int, max_lora_rank: int, dtype: torch.dtype, device: torch.device) -> None:
        if max_loras < 1 or max_lora_rank < 1:
            raise ValueError("max_loras and max_lora_rank must be at least 1")
        self.dims, self.max_loras, self.max_lora_rank = dims, max_loras, max_lora_rank
        self.dtype, self.device = dtype, device
        widths = module_widths(dims)
        self.a: dict[str, torch.Tensor] = {}
        self.b: dict[str, torch.Tensor] = {}
        self.part_ends: dict[str, torch.Tensor] = {}
        for projection, modules in PROJECTIONS.items():
            width_in = widths[modules[0]][0]
            ends = torch.tensor([widths[module][1] for module in modules], dtype=torch.long).cumsum(0)
            self.part_ends[projection] = ends.to(device)
            shape_a = (dims.num_layers, max_loras, len(modules) * max_lora_rank, width_in)
            self.a[projection] = torch.zeros(shape_a, dtype=dtype, device=device)
            shape_b = (dims.num_layers, max_loras, max_lora_rank, int(ends[-1]))  # B transposed
            self.b[projection] = torch.zeros(shape_b, dtype=dtype, device=device)
        self.scales = torch.zeros(max_loras, dtype=torch.float32, device=device)
        self.ranks = torch.zeros(max_loras, dtype=torch.long, device=device)
        self.names: list[str | None] = [None] * max_loras
        self._kernel = _kernel_for(device, dtype)

    def load(self, slot: int, adapter: Adapter) -> None:
        """Put `adapter` in `slot` (what was there is overwritten)."""
        if adapter.rank > self.max_lora_rank:
            raise AdapterError(f"adapter {adapter.name!r}: rank {adapter.rank} is above max_lora_rank {self.max_lora_rank}")
        self.clear(slot)
        widths = module_widths(self.dims)
        for projection, modules in PROJECTIONS.items():
            column = 0
            for part, module in enumerate(modules):
                width_out = widths[module][1]
                ranks = slice(part * self.max_lora_rank, part * self.max_lora_rank + adapter.rank)
                for layer in range(self.dims.num_layers):
                    pair = adapter.matrices.get((layer, module))
                    if pair is not None:
                        self.a[projection][layer, slot, ranks] = pair[0].to(self.dtype)
                        self.b[projection][layer, slot, : adapter.rank, column : column + width_out] = pair[1].T.to(self.dtype)
                column += width_out
        self.scales[slot] = adapter.scale
        self.ranks[slot] = adapter.rank
        self.names[slot] = adapter.name

    def clear(self, slot: int) -> None:
        for tensors in (self.a, self.b):
            for stacked in tensors.values():
                stacked[:, slot].zero_()
        self.scales[slot] = 0.0
        self.ranks[slot] = 0
        self.names[slot] = None

    def add_delta(self, projection: str, layer: int, x: torch.Tensor, out: torch.Tensor, row_slots: torch.Tensor) -> None:
        """out[t] += the delta of row t's adapter (row_slots[t], NO_ADAPTER for none), in place."""
        a, b, ends = self.a[projection][layer], self.b[projection][layer], self.part_ends[projection]
        if self._kernel is not None:
            self._kernel(x, a, b, ends, self.ranks, row_slots, self.scales, out)
            return
        rank, starts = self.max_lora_rank, [0, *ends[:-1].tolist()]
        for slot in row_slots.unique().tolist():
            if slot == NO_ADAPTER:
                continue
            rows = (row_slots == slot).nonzero().squeeze(1)
            shrunk = x[rows].float() @ a[slot].float().T * self.scales[slot]  # [n, parts * rank]
            delta = torch.cat(
                [
                    shrunk[:, part * rank : (part + 1) * rank] @ b[slot, :, start:end].float()
                    for part, (start, end) in enumerate(zip(starts, ends.tolist()))
                ],
                dim=1,
            )
            out.index_add_(0, rows, delta.to(out.dtype))


def _kernel_for(device: torch.device, dtype: torch.dtype):
    """torch.ops.llm_kernels.lora_delta where it can run (CPU, float32 or bfloat16), else None."""
    if dtype not in (torch.float32, torch.bfloat16):
        return None
    from llm.engine.kernels.load import KernelUnavailable, load_kernels

    try:
        load_kernels("lora", device)
    except KernelUnavailable:
        return None
    return torch.ops.llm_kernels.lora_delta
