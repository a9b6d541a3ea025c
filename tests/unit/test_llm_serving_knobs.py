"""The LLM's knobs live once, in model_repository/llm/config.pbtxt's parameters."""

from __future__ import annotations

import dataclasses
import re

import pytest

from llm.contract import EngineConfig, SchedulerConfig
from llm.serving.knobs import KNOWN, KnobError, knobs_to_parameters, parameters_from_json, parameters_from_pbtxt, parse_knobs
from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.repo.model_config import load_config

CONFIG = MODEL_REPOSITORY / "llm" / "config.pbtxt"


def test_the_committed_config_sets_every_knob_by_its_field_name() -> None:
    assert set(parameters_from_pbtxt(CONFIG)) == {*KNOWN, "engine"}
    assert parameters_from_pbtxt(CONFIG)["engine"] == "native"
    names = {field.name for cls in (SchedulerConfig, EngineConfig) for field in dataclasses.fields(cls)}
    assert set(KNOWN) == names


def test_the_committed_config_parses_into_the_configs() -> None:
    scheduler, engine = parse_knobs(parameters_from_pbtxt(CONFIG))
    assert scheduler.mode == "iteration"
    assert isinstance(scheduler.max_num_seqs, int) and isinstance(scheduler.max_wait_ms, float)
    assert engine.max_model_len > 0 and engine.kv_cache_bytes > 0


def test_the_committed_config_serves_exactly_the_contract_defaults() -> None:
    """One value per knob: a tool that builds SchedulerConfig() or EngineConfig() in process
    runs what Triton serves from the committed config."""
    served = parse_knobs(parameters_from_pbtxt(CONFIG))
    defaults = (SchedulerConfig(), EngineConfig())
    differ = {
        name: (getattr(config, name), getattr(default, name))
        for config, default in zip(served, defaults)
        for name in (field.name for field in dataclasses.fields(default))
        if getattr(config, name) != getattr(default, name)
    }
    assert not differ, f"config.pbtxt and llm/contract.py disagree (knob: (config, contract)): {differ}"


def test_the_docs_knob_table_names_every_knob_with_its_default() -> None:
    """docs/llm.md's table is what users read: its defaults are the contract's."""
    table = dict(re.findall(r"^\| `(\w+)` \| `?([^`|]+?)`? \|", (REPO_ROOT / "docs" / "llm.md").read_text(), flags=re.M))
    assert set(KNOWN) <= set(table), f"knobs missing from docs/llm.md's table: {sorted(set(KNOWN) - set(table))}"
    documented = parse_knobs({name: table[name] for name in KNOWN})
    differ = {
        name: (getattr(docs, name), getattr(default, name))
        for docs, default in zip(documented, (SchedulerConfig(), EngineConfig()))
        for name in (field.name for field in dataclasses.fields(default))
        if getattr(docs, name) != getattr(default, name)
    }
    assert not differ, f"docs/llm.md and llm/contract.py disagree (knob: (docs, contract)): {differ}"


def test_the_committed_config_is_decoupled_with_the_model_batching_itself() -> None:
    config = load_config(MODEL_REPOSITORY / "llm")
    assert config.model_transaction_policy.decoupled
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    assert [i.name for i in config.input][:4] == ["text_input", "stream", "sampling_parameters", "exclude_input_in_output"]
    assert config.output[0].name == "text_output"


def test_triton_json_and_protobuf_give_the_same_parameters() -> None:
    as_json = {"parameters": {key: {"string_value": value} for key, value in parameters_from_pbtxt(CONFIG).items()}}
    assert parameters_from_json(as_json) == parameters_from_pbtxt(CONFIG)


def test_parsing_round_trips_through_parameters() -> None:
    configs = (SchedulerConfig(mode="request", max_wait_ms=2.5), EngineConfig(dtype="bfloat16", block_size=32))
    assert parse_knobs(knobs_to_parameters(*configs)) == configs


def test_missing_knobs_keep_their_defaults() -> None:
    assert parse_knobs({}) == (SchedulerConfig(), EngineConfig())


@pytest.mark.parametrize(
    ("parameters", "named"),
    [
        ({"max_num_seq": "8"}, "max_num_seq"),
        ({"mode": "continuous"}, "mode"),
        ({"max_num_seqs": "eight"}, "max_num_seqs"),
        ({"max_num_seqs": "0"}, "max_num_seqs"),
        ({"max_wait_ms": "-1"}, "max_wait_ms"),
        ({"dtype": "int4"}, "dtype"),
        ({"weights": "int3"}, "weights"),
        ({"weights": "int8", "device": "cuda"}, "weights='int8' runs on the CPU only"),
    ],
)
def test_an_unknown_key_or_a_bad_value_is_refused_by_name(parameters: dict, named: str) -> None:
    with pytest.raises(KnobError, match=named):
        parse_knobs(parameters)


@pytest.mark.parametrize(("key", "value"), [("weights", "dense"), ("weights", "int8"), ("weights", "int4"), ("dtype", "auto")])
def test_the_weight_formats_and_auto_dtype_are_accepted(key: str, value: str) -> None:
    _, engine = parse_knobs({key: value})
    assert getattr(engine, key) == value


def test_the_weights_choices_are_the_engine_formats() -> None:
    from llm.engine.linear import WEIGHT_FORMATS
    from llm.serving.knobs import CHOICES

    assert CHOICES["weights"] == WEIGHT_FORMATS


def test_the_dense_kernel_choices_are_the_engines() -> None:
    from llm.engine.linear import DENSE_KERNELS
    from llm.serving.knobs import CHOICES

    assert CHOICES["dense_kernel"] == DENSE_KERNELS
    assert parse_knobs({"dense_kernel": "amx"})[1].dense_kernel == "amx"
    with pytest.raises(KnobError, match="dense_kernel"):
        parse_knobs({"dense_kernel": "mkl"})
