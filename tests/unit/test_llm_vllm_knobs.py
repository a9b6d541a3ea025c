"""The vLLM engine's knobs live once, in model_repository/llm/configs/vllm.pbtxt, and become vLLM's
engine arguments, its server's flags and the GPU container's model.json from there."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from llm.serving.knobs import KnobError, as_parameters, engine_of, parameters_from_pbtxt, parse_knobs
from llm.vllm_engine.knobs import VllmKnobs
from tools.paths import MODEL_REPOSITORY
from tools.repo.model_config import config_path, load_config

VLLM_CONFIG = MODEL_REPOSITORY / "llm" / "configs" / "vllm.pbtxt"
NATIVE_CONFIG = MODEL_REPOSITORY / "llm" / "config.pbtxt"


def test_the_vllm_config_sets_every_knob_by_its_field_name_and_says_its_engine() -> None:
    parameters = parameters_from_pbtxt(VLLM_CONFIG)
    assert engine_of(parameters) == "vllm"
    assert set(parameters) - {"engine", "EXECUTION_ENV_PATH"} == {field.name for field in dataclasses.fields(VllmKnobs)}
    assert parameters["EXECUTION_ENV_PATH"] == "$$TRITON_MODEL_DIRECTORY/../../.venv-vllm"
    knobs = VllmKnobs.from_parameters(parameters)
    assert knobs.device == "cpu" and knobs.dtype == "bfloat16"


def test_the_vllm_config_serves_exactly_the_knobs_defaults() -> None:
    knobs, defaults = VllmKnobs.from_parameters(parameters_from_pbtxt(VLLM_CONFIG)), VllmKnobs()
    differ = {
        field.name: (getattr(knobs, field.name), getattr(defaults, field.name))
        for field in dataclasses.fields(VllmKnobs)
        if getattr(knobs, field.name) != getattr(defaults, field.name)
    }
    assert not differ, f"configs/vllm.pbtxt and VllmKnobs disagree (knob: (config, default)): {differ}"


def test_the_native_config_says_native_and_refuses_to_parse_as_vllm() -> None:
    parameters = parameters_from_pbtxt(NATIVE_CONFIG)
    assert engine_of(parameters) == "native"
    with pytest.raises(KnobError, match="native engine, not vllm"):
        VllmKnobs.from_parameters(parameters)
    with pytest.raises(KnobError, match="for the vllm engine, not the native one"):
        parse_knobs(parameters_from_pbtxt(VLLM_CONFIG))


def test_both_configs_share_the_model_name_and_its_inputs_and_outputs() -> None:
    native, vllm = load_config(NATIVE_CONFIG), load_config(VLLM_CONFIG)
    assert native.name == vllm.name == "llm"
    assert native.input == vllm.input and native.output == vllm.output
    assert vllm.model_transaction_policy.decoupled and vllm.max_batch_size == 0


def test_triton_picks_the_custom_config_by_name_and_falls_back_to_config_pbtxt(tmp_path: Path) -> None:
    assert config_path(MODEL_REPOSITORY / "llm", "vllm") == VLLM_CONFIG
    assert config_path(MODEL_REPOSITORY / "llm") == NATIVE_CONFIG
    assert config_path(MODEL_REPOSITORY / "encoder", "vllm") == MODEL_REPOSITORY / "encoder" / "config.pbtxt"


def test_parameters_round_trip() -> None:
    knobs = VllmKnobs(policy="priority", max_num_seqs=4, long_prefill_token_threshold=64, enforce_eager=True)
    assert VllmKnobs.from_parameters({"engine": "vllm", **as_parameters(knobs)}) == knobs


@pytest.mark.parametrize(
    ("parameters", "named"),
    [
        ({"max_num_seq": "8"}, "max_num_seq"),
        ({"mode": "iteration"}, "mode"),  # the native engine's knob, unknown to vLLM
        ({"max_num_seqs": "0"}, "max_num_seqs"),
        ({"policy": "lifo"}, "policy"),
        ({"block_size": "16"}, "block_size"),  # vLLM's CPU kernel takes multiples of 32
        ({"gpu_memory_utilization": "1.5"}, "gpu_memory_utilization"),
        ({"max_num_batched_tokens": "64", "long_prefill_token_threshold": "128"}, "long_prefill_token_threshold"),
        ({"engine": "tensorrt-llm"}, "engine"),
    ],
)
def test_a_bad_knob_is_refused_by_name(parameters: dict, named: str) -> None:
    with pytest.raises(KnobError, match=named):
        VllmKnobs.from_parameters({"engine": "vllm", **parameters})


def test_engine_arguments_use_vllms_names() -> None:
    args = VllmKnobs(policy="priority", kv_cache_bytes=2**29).engine_args(Path("/m"))
    assert args["scheduling_policy"] == "priority" and args["kv_cache_memory_bytes"] == 2**29
    assert args["model"] == "/m" and "gpu_memory_utilization" not in args
    gpu = VllmKnobs(device="cuda", kv_cache_bytes=0, block_size=16).engine_args(Path("/m"))
    assert "kv_cache_memory_bytes" not in gpu and gpu["gpu_memory_utilization"] == 0.9


def test_server_flags_spell_the_same_engine_on_the_command_line() -> None:
    flags = VllmKnobs(enable_prefix_caching=False, enforce_eager=True, max_num_seqs=8).server_flags(Path("/m"))
    assert flags[:2] == ["--model", "/m"]
    assert "--no-enable-prefix-caching" in flags and "--enforce-eager" in flags
    assert flags[flags.index("--max-num-seqs") + 1] == "8"
    assert flags[flags.index("--scheduling-policy") + 1] == "fcfs"


def test_lora_arguments_are_given_only_when_enable_lora_is_on() -> None:
    assert "enable_lora" not in VllmKnobs().engine_args(Path("/m")) and "max_loras" not in VllmKnobs().engine_args(Path("/m"))
    args = VllmKnobs(enable_lora=True, max_loras=2, max_lora_rank=8).engine_args(Path("/m"))
    assert (args["enable_lora"], args["max_loras"], args["max_lora_rank"]) == (True, 2, 8)
    flags = VllmKnobs(enable_lora=True).server_flags(Path("/m"))
    assert "--enable-lora" in flags and flags[flags.index("--max-lora-rank") + 1] == "16"


def test_the_vllm_environment_is_found_from_the_model_folder_and_its_absence_named(tmp_path: Path) -> None:
    from tools.repo.artifacts import environment_path, missing_environments

    config = load_config(VLLM_CONFIG)
    assert environment_path(config, MODEL_REPOSITORY / "llm") == (MODEL_REPOSITORY.parent / ".venv-vllm").resolve()
    model = tmp_path / "repo" / "llm"
    (model / "configs").mkdir(parents=True)
    (model / "config.pbtxt").write_text(NATIVE_CONFIG.read_text())
    (model / "configs" / "vllm.pbtxt").write_text(VLLM_CONFIG.read_text())
    assert missing_environments(tmp_path / "repo") == []  # config.pbtxt: no environment of its own
    assert missing_environments(tmp_path / "repo", "vllm") == [("llm", (tmp_path / ".venv-vllm").resolve())]


def test_a_preset_copies_the_vllm_config_with_its_environment_made_absolute(tmp_path: Path) -> None:
    from tools.repo.artifacts import EXECUTION_ENV_KEY, missing_artifacts
    from tools.repo.presets import write_preset

    if missing_artifacts(MODEL_REPOSITORY, "vllm"):
        pytest.skip("needs `make export` (the preset links the exported files)")
    out = write_preset("chat", out=tmp_path / "chat")
    copied = load_config(out / "llm" / "configs" / "vllm.pbtxt")
    assert copied.parameters[EXECUTION_ENV_KEY].string_value == str((MODEL_REPOSITORY.parent / ".venv-vllm").resolve())
    assert engine_of({key: value.string_value for key, value in copied.parameters.items()}) == "vllm"
