"""TensorRT export: the profile comes from the committed configs; the build needs a GPU."""

from __future__ import annotations

import subprocess
import sys

import pytest

from export.tensorrt_plan import gpu_problems, parity_batches, profile_from_configs
from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.repo.model_config import load_config

TOKENIZER_JSON = MODEL_REPOSITORY / "tokenizer" / "1" / "tokenizer.json"


def committed_profile():
    return profile_from_configs(load_config(MODEL_REPOSITORY / "encoder"), load_config(MODEL_REPOSITORY / "tokenizer"), TOKENIZER_JSON)


def test_profile_batch_axis_spans_one_to_max_with_the_optimum_at_the_largest_preferred_size() -> None:
    encoder = load_config(MODEL_REPOSITORY / "encoder")
    assert committed_profile().batch == (1, max(encoder.dynamic_batching.preferred_batch_size), encoder.max_batch_size)


def test_profile_sequence_axis_covers_the_padding_policy() -> None:
    multiple = int(load_config(MODEL_REPOSITORY / "tokenizer").parameters["pad_to_multiple_of"].string_value)
    low, typical, high = committed_profile().sequence
    assert low == multiple and high % multiple == 0 and low <= typical <= high
    shapes = {ids.shape for ids, _ in parity_batches(TOKENIZER_JSON, multiple, committed_profile())}
    assert {shape[1] for shape in shapes} == {low, high}, "the parity check runs both ends of the sequence range"


def test_export_without_a_gpu_says_so_and_exits_non_zero() -> None:
    if not gpu_problems():
        pytest.skip("this host can build TensorRT engines; see the gpu test below")
    result = subprocess.run(
        [sys.executable, "-m", "export", "--target", "tensorrt"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "TensorRT export needs a GPU host" in result.stderr


@pytest.mark.gpu
def test_engine_builds_and_matches_onnx_runtime(tmp_path) -> None:
    problems = gpu_problems()
    if problems:
        pytest.skip("needs an NVIDIA GPU with tensorrt and polygraphy: " + "; ".join(problems))
    from export.tensorrt_plan import export_tensorrt

    out = export_tensorrt(MODEL_REPOSITORY, "encoder", "tokenizer", out=tmp_path / "tensorrt_repository")
    assert (out / "encoder" / "1" / "model.plan").stat().st_size > 0
    assert load_config(out / "encoder").platform == "tensorrt_plan"
