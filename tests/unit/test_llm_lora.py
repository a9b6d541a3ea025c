"""LoRA adapters in one step (llm/engine/lora.py): each row's logits equal those of
transformers with that row's adapter merged into the weights, whatever shares the step."""

from __future__ import annotations

import json

import pytest
import torch

from llm.adapters import AdapterError
from llm.contract import ScheduledChunk
from llm.engine import LlamaDims
from llm.engine.lora import PROJECTIONS, Adapter, module_widths
from tools.lora.random_adapters import ALL_MODULES, write_adapter

pytest.importorskip("transformers")
from tests.unit.tiny_llama import tiny_executor, tiny_hf_llama

BLOCK = 4
ATOL = 2e-4


@pytest.fixture(scope="module")
def hf_model():
    return tiny_hf_llama()


@pytest.fixture(scope="module")
def dims(hf_model) -> LlamaDims:
    return LlamaDims.from_hf_config(hf_model.config)


def block_of(module: str) -> str:
    return "self_attn" if module in PROJECTIONS["qkv"] + PROJECTIONS["o"] else "mlp"


def merged_hf_logits(hf_model, adapter: Adapter | None, tokens: list[int]) -> torch.Tensor:
    """transformers' next-token logits with `adapter` merged into its weights (W + scale B A)."""
    state = {name: tensor.clone() for name, tensor in hf_model.state_dict().items()}
    if adapter is not None:
        for (layer, module), (a, b) in adapter.matrices.items():
            name = f"model.layers.{layer}.{block_of(module)}.{module}.weight"
            state[name] = state[name] + adapter.scale * (b @ a)
    merged = type(hf_model)(hf_model.config).eval()
    merged.load_state_dict(state)
    with torch.no_grad():
        return merged(torch.tensor([tokens])).logits[0, -1].float()


def prompt(seed: int, length: int) -> list[int]:
    return torch.randint(3, 97, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.fixture(scope="module")
def adapters(tmp_path_factory, dims) -> list[Adapter]:
    root = tmp_path_factory.mktemp("adapters")
    specs = [  # ranks below the slots' maximum, only some modules, rsLoRA
        ("every-module", 4, 8.0, ALL_MODULES, {}),
        ("attention-only", 2, 4.0, ("q_proj", "v_proj"), {}),
        ("mlp-rslora", 3, 6.0, ("gate_proj", "down_proj"), {"use_rslora": True}),
    ]
    return [
        Adapter.from_peft(name, write_adapter(root / name, dims, seed, rank, alpha, modules, std=0.3, **extra), dims)
        for seed, (name, rank, alpha, modules, extra) in enumerate(specs)
    ]


@pytest.mark.parametrize("attention", ["paged", "padded"])
def test_a_step_mixing_adapters_gives_each_row_its_merged_models_logits(hf_model, adapters, attention) -> None:
    from llm.engine.kernels.load import KernelUnavailable

    try:
        executor = tiny_executor(hf_model, 64, BLOCK, attention=attention)
    except KernelUnavailable as error:
        pytest.skip(str(error))
    slots = executor.enable_lora(max_loras=4, max_lora_rank=4)
    for slot, adapter in enumerate(adapters):
        slots.load(slot, adapter)
    prompts = [prompt(seed, 9 + seed) for seed in range(4)]  # three adapters and the base model
    adapter_of = [0, 1, 2, -1]
    tables = [[8 * i + j for j in range(8)] for i in range(4)]
    executor.execute([ScheduledChunk(i, p[:-1], 0, tables[i], False, adapter_of[i]) for i, p in enumerate(prompts)])
    logits = executor.execute([ScheduledChunk(i, p[-1:], len(p) - 1, tables[i], True, adapter_of[i]) for i, p in enumerate(prompts)])
    for i, p in enumerate(prompts):
        adapter = adapters[adapter_of[i]] if adapter_of[i] >= 0 else None
        torch.testing.assert_close(logits[i], merged_hf_logits(hf_model, adapter, p), atol=ATOL, rtol=0)
    # the adapters change the logits: the check above is not the base model passing for all
    assert not torch.allclose(logits[0], merged_hf_logits(hf_model, None, prompts[0]), atol=1e-2)


def test_the_kernel_and_torchs_per_slot_delta_agree_in_bfloat16(hf_model, dims, adapters) -> None:
    from llm.engine.lora import LoraSlots

    slots = LoraSlots(dims, 4, 4, torch.bfloat16, torch.device("cpu"))
    if slots._kernel is None:
        pytest.skip("the lora_delta kernel cannot run here")
    for slot, adapter in enumerate(adapters):
        slots.load(slot, adapter)
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(7, dims.hidden_size, generator=generator).to(torch.bfloat16)
    row_slots = torch.tensor([2, -1, 0, 0, 1, 2, -1])
    base = torch.randn(7, module_widths(dims)["q_proj"][1] + 2 * module_widths(dims)["k_proj"][1], generator=generator).to(torch.bfloat16)
    by_kernel, by_torch = base.clone(), base.clone()
    slots.add_delta("qkv", 1, x, by_kernel, row_slots)
    slots._kernel = None
    slots.add_delta("qkv", 1, x, by_torch, row_slots)
    torch.testing.assert_close(by_kernel.float(), by_torch.float(), atol=0.05, rtol=0.02)
    assert torch.equal(by_kernel[1], base[1]) and torch.equal(by_kernel[6], base[6])  # rows without an adapter untouched
    assert not torch.equal(by_kernel[2], base[2])  # slot 0 adapts q, k and v
    assert torch.equal(by_kernel[0], base[0])  # slot 2 adapts only the MLP: no qkv delta


def test_a_rank_above_the_slots_maximum_is_refused_by_name(dims, adapters) -> None:
    from llm.engine.lora import LoraSlots

    slots = LoraSlots(dims, 2, 2, torch.float32, torch.device("cpu"))
    with pytest.raises(AdapterError, match=r"'every-module': rank 4 is above max_lora_rank 2"):
        slots.load(0, adapters[0])


def test_a_chunk_naming_a_slot_without_adapters_enabled_is_refused(hf_model) -> None:
    executor = tiny_executor(hf_model, 16, BLOCK, attention="padded")
    with pytest.raises(ValueError, match="no adapters are enabled"):
        executor.execute([ScheduledChunk(0, [5, 6, 7], 0, [0, 1], True, 0)])


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("no-weights", "no adapter_model.safetensors"),
        ("wrong-shape", r"layer 0 q_proj has A \(4, 7\)"),
        ("unknown-tensor", "is not a LoRA A or B of a known projection"),
        ("dora", "DoRA"),
        ("not-json", "is not a LoRA config"),
        ("damaged-weights", "cannot read"),
    ],
)
def test_a_malformed_adapter_is_refused_with_the_reason(tmp_path, dims, damage, problem) -> None:
    from safetensors.torch import save_file

    folder = write_adapter(tmp_path / "bad", dims, 0, 4, 8.0, ("q_proj",))
    weights = folder / "adapter_model.safetensors"
    if damage == "no-weights":
        weights.unlink()
    elif damage == "wrong-shape":
        save_file(
            {
                "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(4, 7),
                "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": torch.zeros(48, 4),
            },
            str(weights),
        )
    elif damage == "unknown-tensor":
        save_file({"base_model.model.model.layers.0.self_attn.rotary.lora_A.weight": torch.zeros(4, 48)}, str(weights))
    elif damage == "dora":
        (folder / "adapter_config.json").write_text(json.dumps({"r": 4, "lora_alpha": 8, "use_dora": True}))
    elif damage == "not-json":
        (folder / "adapter_config.json").write_text("{r: 4")
    elif damage == "damaged-weights":
        weights.write_bytes(weights.read_bytes()[:40])
    with pytest.raises(AdapterError, match=problem) as raised:
        Adapter.from_peft("bad", folder, dims)
    assert "'bad'" in str(raised.value)


def test_the_checkpoints_adapter_list_loads_every_good_adapter_and_names_the_bad_one(tmp_path, hf_model, dims, adapters) -> None:
    from llm.contract import EngineConfig
    from llm.engine import LlamaExecutor, save_checkpoint
    from llm.engine.checkpoint import fuse_hf_state_dict

    folder = tmp_path / "1"
    save_checkpoint(folder, dims, fuse_hf_state_dict(hf_model.state_dict(), dims))
    write_adapter(tmp_path / "adapters" / "good", dims, 0, 4, 8.0, ALL_MODULES, std=0.3)
    write_adapter(tmp_path / "adapters" / "bad", dims, 1, 4, 8.0, ("q_proj",))
    (tmp_path / "adapters" / "bad" / "adapter_config.json").write_text("{r: 4")
    (folder / "multi_lora.json").write_text(json.dumps({"bad": "../adapters/bad", "good": str(tmp_path / "adapters" / "good")}))
    config = EngineConfig(block_size=BLOCK, kv_cache_bytes=1 << 20, max_model_len=64, max_lora_rank=8, attention="padded")
    executor = LlamaExecutor.from_checkpoint(folder, config)
    assert executor.adapter_slots == {"good": 0}
    assert "'bad'" in executor.adapter_errors["bad"] and "is not a LoRA config" in executor.adapter_errors["bad"]
    tokens = prompt(7, 10)
    logits = executor.execute([ScheduledChunk(0, tokens, 0, [0, 1, 2], True, executor.adapter_slots["good"])])
    good = Adapter.from_peft("good", tmp_path / "adapters" / "good", dims)
    torch.testing.assert_close(logits[0], merged_hf_logits(hf_model, good, tokens), atol=ATOL, rtol=0)


@pytest.mark.parametrize(
    ("listing", "problem"), [("[1, 2]", "must map adapter names to folders"), ("{", "is not JSON"), ('{" ": "x"}', "empty name")]
)
def test_a_malformed_adapter_list_is_refused_with_the_reason(tmp_path, listing, problem) -> None:
    from llm.adapters import read_adapter_list

    (tmp_path / "multi_lora.json").write_text(listing)
    with pytest.raises(AdapterError, match=problem):
        read_adapter_list(tmp_path / "multi_lora.json")


def test_the_random_adapter_tool_writes_adapters_the_engine_reads_and_lists_them(tmp_path, hf_model, dims) -> None:
    from llm.adapters import read_adapter_list
    from llm.engine import save_checkpoint
    from llm.engine.checkpoint import fuse_hf_state_dict
    from tools.lora.random_adapters import main

    checkpoint = tmp_path / "model" / "1"
    save_checkpoint(checkpoint, dims, fuse_hf_state_dict(hf_model.state_dict(), dims))
    adapter_list = checkpoint / "multi_lora.json"
    argv = ["--count", "3", "--rank", "2", "--out", str(tmp_path / "adapters"), "--checkpoint", str(checkpoint), "-q"]
    assert main([*argv, "--list", str(adapter_list)]) == 0
    listed = read_adapter_list(adapter_list)
    assert sorted(listed) == ["random-0", "random-1", "random-2"]
    loaded = [Adapter.from_peft(name, folder, dims) for name, folder in listed.items()]
    assert {adapter.rank for adapter in loaded} == {2}
    assert all({module for _, module in adapter.matrices} == {"q_proj", "v_proj"} for adapter in loaded)  # PEFT's default for a Llama
    assert not torch.equal(loaded[0].matrices[(0, "q_proj")][0], loaded[1].matrices[(0, "q_proj")][0])
    assert main([*argv, "--checkpoint", str(tmp_path / "nowhere")]) == 2
    assert main([*argv, "--target-modules", "all", "--prefix", "wide", "--count", "1"]) == 0
    wide = Adapter.from_peft("wide-0", tmp_path / "adapters" / "wide-0", dims)
    assert len(wide.matrices) == 7 * dims.num_layers
    with pytest.raises(SystemExit):
        main([*argv, "--target-modules", "q_proj,lm_head"])
