"""Padding policies: the tokenizer's widths and bucket choice, the configs each policy writes (no server)."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from tools.paths import MODEL_REPOSITORY
from tools.repo.length_policy import POLICIES, gpu_variant_problem, policy_configs, policy_of, write_policy_repository
from tools.repo.model_config import load_config
from tools.repo.variant import VariantError, variant_config


def _tokenizer_module(name: str):
    """A module of the tokenizer's version folder (Triton puts that folder on the stub's path)."""
    spec = importlib.util.spec_from_file_location(f"tokenizer_{name}", MODEL_REPOSITORY / "tokenizer" / "1" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


padding = _tokenizer_module("padding_policy")


@pytest.mark.parametrize(("length", "bucket"), [(1, 16), (16, 16), (17, 32), (33, 64), (100, 128), (129, 256), (256, 256), (300, 512)])
def test_a_request_goes_to_the_smallest_bucket_that_holds_it(length: int, bucket: int) -> None:
    assert padding.bucket_for(length, padding.DEFAULT_BUCKETS) == bucket


def test_batch_padding_gives_every_request_the_longest_rounded_up() -> None:
    policy = padding.PaddingPolicy("batch", 16)
    assert policy.widths([7, 40, 12]) == [48, 48, 48]
    assert not policy.sends_by_width


def test_bucket_padding_keeps_a_query_out_of_the_passage_width() -> None:
    policy = padding.PaddingPolicy("buckets", buckets=(16, 32, 64, 128, 256))
    assert policy.widths([7, 180, 20]) == [16, 256, 32]
    assert policy.sends_by_width


def test_request_padding_is_each_requests_own_length() -> None:
    assert padding.PaddingPolicy("request").widths([7, 180, 20]) == [7, 180, 20]


def test_policy_parameters_are_read_from_the_config_strings() -> None:
    policy = padding.PaddingPolicy.from_parameters({"padding": "buckets", "length_buckets": "8,64,256"})
    assert policy.buckets == (8, 64, 256)
    assert padding.PaddingPolicy.from_parameters({}) == padding.PaddingPolicy("batch", 16)


@pytest.mark.parametrize(
    ("parameters", "message"),
    [({"padding": "fixed"}, "not one of"), ({"length_buckets": "64,16"}, "ascending"), ({"length_buckets": "a,b"}, "integers")],
)
def test_bad_policy_parameters_are_refused_by_name(parameters: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        padding.PaddingPolicy.from_parameters(parameters)


def test_pad_rows_fills_ids_and_mask_to_the_width() -> None:
    ids, mask = padding.pad_rows([[101, 7, 102], [101, 102]], 4, 0)
    np.testing.assert_array_equal(ids, [[101, 7, 102, 0], [101, 102, 0, 0]])
    np.testing.assert_array_equal(mask, [[1, 1, 1, 0], [1, 1, 0, 0]])
    assert ids.dtype == np.int64


def test_the_committed_repository_runs_the_ragged_policy() -> None:
    assert policy_of(load_config(MODEL_REPOSITORY / "tokenizer"), load_config(MODEL_REPOSITORY / "encoder")) == "ragged"


@pytest.mark.parametrize("policy", POLICIES)
def test_each_policy_round_trips_through_its_configs(policy: str) -> None:
    tokenizer, encoder = policy_configs(MODEL_REPOSITORY, policy)
    assert policy_of(tokenizer, encoder) == policy
    assert all(item.allow_ragged_batch == (policy == "ragged") for item in encoder.input)
    # the tokenizer reads exactly what the writer wrote
    parameters = {key: value.string_value for key, value in tokenizer.parameters.items()}
    assert padding.PaddingPolicy.from_parameters(parameters).mode == {"batch": "batch", "buckets": "buckets", "ragged": "request"}[policy]


def test_a_policy_repository_is_written_beside_the_committed_one(tmp_path) -> None:
    committed = MODEL_REPOSITORY / "tokenizer" / "config.pbtxt", MODEL_REPOSITORY / "encoder" / "config.pbtxt"
    before = [path.read_text() for path in committed]
    out = write_policy_repository("batch", tmp_path / "batch")
    tokenizer, encoder = load_config(out / "tokenizer"), load_config(out / "encoder")
    assert policy_of(tokenizer, encoder) == "batch"
    assert (out / "tokenizer" / "1" / "padding_policy.py").is_file()
    assert [path.read_text() for path in committed] == before, "the committed repository is never edited"
    with pytest.raises(ValueError, match="source repository"):
        write_policy_repository("ragged", MODEL_REPOSITORY / "sub")


@pytest.mark.parametrize("kind", ["gpu", "tensorrt"])
def test_the_container_variant_refuses_ragged_inputs_its_native_backends_cannot_take(kind: str) -> None:
    _, ragged_encoder = policy_configs(MODEL_REPOSITORY, "ragged")
    assert "flattened" in gpu_variant_problem(ragged_encoder)
    with pytest.raises(VariantError, match="ragged"):
        variant_config(ragged_encoder, kind)
    _, bucket_encoder = policy_configs(MODEL_REPOSITORY, "buckets")
    assert variant_config(bucket_encoder, kind).instance_group[0].kind == bucket_encoder.instance_group[0].KIND_GPU


@pytest.mark.parametrize("counts", [[2, 1, 3], [0, 2, 0, 1, 0], [0], [3]])
def test_each_requests_longest_text_is_found_in_one_reduction_empty_requests_included(counts: list[int]) -> None:
    lengths = np.array([5, 9, 3, 7, 2, 8][: sum(counts)], dtype=np.int64)
    expected, start = [], 0
    for count in counts:
        expected.append(int(lengths[start : start + count].max(initial=0)))
        start += count
    assert padding.longest_per_request(lengths, counts) == expected


def test_pad_rows_matches_a_row_by_row_fill_for_ragged_rows() -> None:
    rows = [[101, 5, 6, 7, 102], [], [101, 102], list(range(1, 17))]
    ids, mask = padding.pad_rows(rows, 16, 0)
    for row, tokens in enumerate(rows):
        assert ids[row, : len(tokens)].tolist() == tokens and not ids[row, len(tokens) :].any()
        assert mask[row].tolist() == [1] * len(tokens) + [0] * (16 - len(tokens))
