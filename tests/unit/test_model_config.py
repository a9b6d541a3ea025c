"""config.pbtxt is read and written through Triton's protobuf schema."""

from __future__ import annotations

import json

import pytest

from tools.paths import MODEL_REPOSITORY
from tools.repo.model_config import (
    ModelConfig,
    batching_problems,
    config_from_dict,
    format_config,
    load_config,
    parse_config,
    save_config,
    to_override_json,
)

COMMITTED_MODELS = ("tokenizer", "encoder", "embed")
BATCHING_MODELS = ("tokenizer", "encoder")


@pytest.mark.parametrize("name", COMMITTED_MODELS)
def test_committed_config_round_trips_unchanged(name: str, tmp_path) -> None:
    config = load_config(MODEL_REPOSITORY / name)
    assert config.name == name
    save_config(config, tmp_path / "config.pbtxt")
    assert load_config(tmp_path / "config.pbtxt") == config


@pytest.mark.parametrize("name", BATCHING_MODELS)
def test_batching_models_have_the_required_batching_policy(name: str) -> None:
    config = load_config(MODEL_REPOSITORY / name)
    batcher = config.dynamic_batching
    assert config.HasField("dynamic_batching")
    assert list(batcher.preferred_batch_size), "preferred_batch_size is set"
    assert batcher.priority_levels == 2
    assert 1 <= batcher.default_priority_level <= 2
    assert batcher.default_queue_policy.max_queue_size > 0
    assert batching_problems(config) == []


def test_tokenizer_waits_to_gather_one_batch_so_its_requests_share_a_shape() -> None:
    """It pads each execution to one length, so requests it batches reach the encoder with
    equal shapes and can batch there (the encoder's own delay is the mixed preset's, 0)."""
    assert load_config(MODEL_REPOSITORY / "tokenizer").dynamic_batching.max_queue_delay_microseconds > 0


def queue_policies(config: ModelConfig) -> dict:
    """The policy each priority level runs under: its own, else the default policy."""
    batcher = config.dynamic_batching
    return {
        level: batcher.priority_queue_policy.get(level, batcher.default_queue_policy) for level in range(1, batcher.priority_levels + 1)
    }


@pytest.mark.parametrize("name", BATCHING_MODELS)
def test_every_priority_level_rejects_requests_after_a_default_timeout_that_requests_may_lower(name: str) -> None:
    policies = queue_policies(load_config(MODEL_REPOSITORY / name))
    for level, policy in policies.items():
        assert policy.timeout_action == policy.REJECT, f"level {level}"
        # Triton applies a request's timeout only below the default: without one, it is ignored.
        assert policy.default_timeout_microseconds > 0, f"level {level}"
        assert policy.allow_timeout_override, f"level {level}"
    assert policies[1].default_timeout_microseconds < policies[2].default_timeout_microseconds, "interactive is bounded tighter"


def test_both_steps_of_the_ensemble_bound_each_level_alike() -> None:
    """The ensemble hands a request's priority and timeout to both steps; a backlog can pile
    up in either queue, so both bound it the same way."""
    tokenizer, encoder = (queue_policies(load_config(MODEL_REPOSITORY / name)) for name in BATCHING_MODELS)
    assert tokenizer == encoder


def test_ensemble_is_cached_and_fits_its_steps_batch_limits() -> None:
    ensemble = load_config(MODEL_REPOSITORY / "embed")
    assert ensemble.response_cache.enable
    for step in ensemble.ensemble_scheduling.step:
        assert ensemble.max_batch_size <= load_config(MODEL_REPOSITORY / step.model_name).max_batch_size


def test_encoder_is_warmed_up() -> None:
    assert len(load_config(MODEL_REPOSITORY / "encoder").model_warmup) >= 1


def test_ensemble_maps_match_the_steps_declared_tensors() -> None:
    ensemble = load_config(MODEL_REPOSITORY / "embed")
    for step in ensemble.ensemble_scheduling.step:
        config = load_config(MODEL_REPOSITORY / step.model_name)
        assert set(step.input_map) == {tensor.name for tensor in config.input}
        assert set(step.output_map) == {tensor.name for tensor in config.output}


def test_preferred_size_above_max_batch_size_is_a_problem() -> None:
    config = parse_config("name: 'm' max_batch_size: 8 dynamic_batching { preferred_batch_size: [4, 16] }")
    assert any("16" in problem for problem in batching_problems(config))


def test_unsorted_preferred_sizes_and_bad_priority_default_are_problems() -> None:
    config = parse_config(
        "name: 'm' max_batch_size: 8 dynamic_batching { preferred_batch_size: [8, 2] priority_levels: 2 default_priority_level: 3 }"
    )
    problems = batching_problems(config)
    assert any("ascending" in problem for problem in problems)
    assert any("default_priority_level" in problem for problem in problems)


def test_dynamic_batching_without_batch_dimension_is_a_problem() -> None:
    config = parse_config("name: 'm' max_batch_size: 0 dynamic_batching { }")
    assert batching_problems(config) == ["dynamic_batching needs max_batch_size >= 1"]


def test_max_batch_size_zero_is_written_explicitly() -> None:
    text = format_config(parse_config("name: 'm' platform: 'onnxruntime_onnx'"))
    assert "max_batch_size: 0" in text
    assert parse_config(text).max_batch_size == 0


def test_invalid_config_text_names_the_file(tmp_path) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_text("name: 'm' dynamic_batching { no_such_field: 1 }")
    with pytest.raises(ValueError, match=r"config\.pbtxt.*no_such_field"):
        load_config(path)


def test_override_json_is_a_valid_model_config() -> None:
    config = load_config(MODEL_REPOSITORY / "encoder")
    config.dynamic_batching.max_queue_delay_microseconds = 1234
    document = json.loads(to_override_json(config))
    assert document["dynamic_batching"]["max_queue_delay_microseconds"] in ("1234", 1234)
    assert config_from_dict(document) == config


def test_a_queue_timeout_keeps_its_reject_action_explicit_when_written() -> None:
    from tools.repo.model_config import format_config, parse_config

    config = load_config(MODEL_REPOSITORY / "encoder")
    text = format_config(config)
    assert text.count("timeout_action: REJECT") == 1 + len(config.dynamic_batching.priority_queue_policy)
    assert parse_config(text) == config
    config.dynamic_batching.default_queue_policy.timeout_action = config.dynamic_batching.default_queue_policy.DELAY
    text = format_config(config)
    assert "timeout_action: DELAY" in text and parse_config(text) == config
