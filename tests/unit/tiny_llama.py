"""A tiny random Llama (2 layers, grouped-query attention) as transformers builds it and as
our engine runs it: the reference the engine, the loop and the export gate are checked on."""

from __future__ import annotations

import torch

from llm.contract import EngineConfig
from llm.engine import LlamaDims, LlamaExecutor
from llm.engine.checkpoint import fuse_hf_state_dict


def tiny_hf_llama(
    randomise_norms: bool = True, num_heads: int = 6, intermediate_size: int = 80, vocab_size: int = 97, num_kv_heads: int = 2
):
    """transformers' LlamaForCausalLM with random weights; norms randomised too (HF sets them
    to 1), so a swapped norm changes the logits. `num_heads=8, intermediate_size=96` makes every
    input width a multiple of 32, as the int4 weight format needs."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=8 * num_heads,
        intermediate_size=intermediate_size,
        num_hidden_layers=2,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=8,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
        tie_word_embeddings=True,
        eos_token_id=2,
        bos_token_id=1,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    if randomise_norms:
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "norm" in name:
                    param.uniform_(0.5, 1.5)
    return model


def tiny_executor(
    hf_model,
    num_blocks: int,
    block_size: int = 4,
    dtype: str = "float32",
    weights: str = "dense",
    compile_decode: bool = False,
    attention: str = "auto",
    dense_kernel: str = "auto",
    batch_invariant: bool = True,
) -> LlamaExecutor:
    """Our engine over the same weights, with exactly `num_blocks` KV blocks."""
    dims = LlamaDims.from_hf_config(hf_model.config)
    block_bytes = 2 * dims.num_layers * block_size * dims.num_kv_heads * dims.head_dim * (4 if dtype == "float32" else 2)
    config = EngineConfig(
        dtype=dtype,
        weights=weights,
        block_size=block_size,
        kv_cache_bytes=num_blocks * block_bytes,
        max_model_len=128,
        compile_decode=compile_decode,
        attention=attention,
        dense_kernel=dense_kernel,
        batch_invariant=batch_invariant,
    )
    return LlamaExecutor(dims, fuse_hf_state_dict(hf_model.state_dict(), dims), config)
