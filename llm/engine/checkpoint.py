"""Our checkpoint format: `llm_config.json` (the model's dimensions) + `model.safetensors`.

Weights are stored fused the way the forward uses them (Q, K and V in one matrix, gate and
up in one), so a step runs two matmuls where HF's module layout runs five, and loading needs
no reshaping. `fuse_hf_state_dict` converts a transformers `LlamaForCausalLM` state dict.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from llm.artifacts import CONFIG_FILE as CONFIG_NAME
from llm.artifacts import WEIGHTS_FILE as WEIGHTS_NAME


@dataclass(frozen=True)
class LlamaDims:
    """What the forward needs to know about the model (SmolLM2-135M: 30 layers, 576 wide)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    eos_token_ids: tuple[int, ...]
    bos_token_id: int | None = None

    @property
    def qkv_width(self) -> int:
        return (self.num_heads + 2 * self.num_kv_heads) * self.head_dim

    @classmethod
    def from_hf_config(cls, config, eos_token_ids: tuple[int, ...] | None = None) -> LlamaDims:
        """From a transformers `LlamaConfig` (rope scaling other than the default is refused)."""
        rope = getattr(config, "rope_parameters", None) or {}
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"rope type {rope.get('rope_type')!r} is not supported (only the default RoPE)")
        theta = rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        eos = config.eos_token_id if eos_token_ids is None else eos_token_ids
        eos_ids = tuple(eos) if isinstance(eos, (list, tuple)) else ((eos,) if eos is not None else ())
        return cls(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            intermediate_size=config.intermediate_size,
            num_layers=config.num_hidden_layers,
            num_heads=config.num_attention_heads,
            num_kv_heads=config.num_key_value_heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
            rope_theta=float(theta),
            rms_norm_eps=float(config.rms_norm_eps),
            max_position_embeddings=config.max_position_embeddings,
            tie_word_embeddings=bool(config.tie_word_embeddings),
            eos_token_ids=eos_ids,
            bos_token_id=config.bos_token_id,
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> LlamaDims:
        data = json.loads(text)
        data["eos_token_ids"] = tuple(data["eos_token_ids"])
        return cls(**data)


def layer_key(index: int, name: str) -> str:
    return f"layers.{index}.{name}"


def fuse_hf_state_dict(state: Mapping[str, torch.Tensor], dims: LlamaDims) -> dict[str, torch.Tensor]:
    """HF `LlamaForCausalLM` tensors -> ours (QKV and gate/up concatenated along the output rows)."""
    tensors = {"embed.weight": state["model.embed_tokens.weight"], "norm.weight": state["model.norm.weight"]}
    if not dims.tie_word_embeddings:
        tensors["lm_head.weight"] = state["lm_head.weight"]
    for i in range(dims.num_layers):
        prefix = f"model.layers.{i}."
        attn, mlp = prefix + "self_attn.", prefix + "mlp."
        tensors[layer_key(i, "attn_norm.weight")] = state[prefix + "input_layernorm.weight"]
        tensors[layer_key(i, "qkv.weight")] = torch.cat([state[attn + f"{p}_proj.weight"] for p in "qkv"], dim=0)
        tensors[layer_key(i, "o.weight")] = state[attn + "o_proj.weight"]
        tensors[layer_key(i, "mlp_norm.weight")] = state[prefix + "post_attention_layernorm.weight"]
        tensors[layer_key(i, "gate_up.weight")] = torch.cat([state[mlp + "gate_proj.weight"], state[mlp + "up_proj.weight"]], dim=0)
        tensors[layer_key(i, "down.weight")] = state[mlp + "down_proj.weight"]
    return {name: tensor.detach().contiguous() for name, tensor in tensors.items()}


def save_checkpoint(folder: Path, dims: LlamaDims, tensors: Mapping[str, torch.Tensor]) -> list[Path]:
    """Write the checkpoint files; returns their paths."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    config_path, weights_path = folder / CONFIG_NAME, folder / WEIGHTS_NAME
    save_file(dict(tensors), str(weights_path))
    config_path.write_text(dims.to_json())
    return [config_path, weights_path]


def load_checkpoint(folder: Path) -> tuple[LlamaDims, dict[str, torch.Tensor]]:
    from safetensors.torch import load_file

    config_path, weights_path = folder / CONFIG_NAME, folder / WEIGHTS_NAME
    for path in (config_path, weights_path):
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: run `make export` (python -m export) to write the LLM checkpoint")
    return LlamaDims.from_json(config_path.read_text()), load_file(str(weights_path))
