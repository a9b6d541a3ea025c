"""The GPU model repositories are generated from the committed configs, and stay valid."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tritonclient.grpc import model_config_pb2

from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.repo.artifacts import missing_artifacts
from tools.repo.model_config import ModelConfig, batching_problems, load_config
from tools.repo.variant import VariantError, native_padding_configs, variant_config, write_variant

GPU = model_config_pb2.ModelInstanceGroup.KIND_GPU


def test_gpu_variant_parses_passes_batching_checks_and_has_its_artifacts(tmp_path) -> None:
    out = tmp_path / "gpu"
    names = write_variant("gpu", out)
    assert names == ["embed", "encoder", "llm", "tokenizer"]
    for name in names:
        config = load_config(out / name)
        assert batching_problems(config) == []
    assert missing_artifacts(out) == []


def test_only_the_onnx_runtime_model_moves_to_the_gpu_and_batching_is_unchanged(tmp_path) -> None:
    out = tmp_path / "gpu"
    write_variant("gpu", out)
    encoder, committed = load_config(out / "encoder"), load_config(MODEL_REPOSITORY / "encoder")
    assert [group.kind for group in encoder.instance_group] == [GPU]
    assert encoder.platform == "onnxruntime_onnx"
    assert encoder.dynamic_batching == committed.dynamic_batching
    assert encoder.max_batch_size == committed.max_batch_size
    assert list(encoder.model_warmup) == list(committed.model_warmup)
    assert load_config(out / "embed") == load_config(MODEL_REPOSITORY / "embed")
    tokenizer, committed_tokenizer = load_config(out / "tokenizer"), load_config(MODEL_REPOSITORY / "tokenizer")
    del tokenizer.parameters["padding"], committed_tokenizer.parameters["padding"]
    assert tokenizer == committed_tokenizer, "only the padding policy may differ (ragged -> buckets)"


@pytest.mark.parametrize("kind", ["gpu", "tensorrt"])
def test_the_gpu_variants_run_the_llm_engine_on_cuda_in_bfloat16_and_nothing_else_changes(kind: str) -> None:
    committed = load_config(MODEL_REPOSITORY / "llm")
    assert committed.parameters["device"].string_value == "cpu", "precondition: the committed repository serves on the CPU"
    llm = variant_config(committed, kind)
    assert (llm.parameters["device"].string_value, llm.parameters["dtype"].string_value) == ("cuda", "bfloat16")
    assert [group.kind for group in llm.instance_group] == [group.kind for group in committed.instance_group], "the engine places it"
    for key in ("device", "dtype"):
        del llm.parameters[key], committed.parameters[key]
    assert llm == committed


def test_the_written_gpu_variant_holds_the_llm_on_cuda(tmp_path) -> None:
    write_variant("gpu", tmp_path / "gpu")
    assert load_config(tmp_path / "gpu" / "llm").parameters["device"].string_value == "cuda"


def native_encoder() -> ModelConfig:
    """The committed encoder in the form the GPU variants start from (ragged -> buckets)."""
    return native_padding_configs(MODEL_REPOSITORY).get("encoder") or load_config(MODEL_REPOSITORY / "encoder")


def test_tensorrt_variant_switches_the_platform_and_keeps_batching() -> None:
    committed = native_encoder()
    engine = variant_config(committed, "tensorrt")
    assert engine.platform == "tensorrt_plan"
    assert [group.kind for group in engine.instance_group] == [GPU]
    assert engine.dynamic_batching == committed.dynamic_batching
    assert batching_problems(engine) == []
    assert variant_config(committed, "tensorrt") is not committed and committed.platform == "onnxruntime_onnx"


def test_onnx_runtime_thread_counts_stay_explicit_on_the_gpu_and_leave_with_tensorrt() -> None:
    committed = native_encoder()
    threads = committed.parameters["intra_op_thread_count"].string_value
    assert threads.isdigit() and int(threads) >= 1, "explicit: unset, the native backend gives every instance all cores"
    assert variant_config(committed, "gpu").parameters["intra_op_thread_count"].string_value == threads
    assert "intra_op_thread_count" not in variant_config(committed, "tensorrt").parameters


def test_tensorrt_variant_without_an_engine_says_how_to_build_one(tmp_path) -> None:
    with pytest.raises(VariantError, match="make export TARGET=tensorrt"):
        write_variant("tensorrt", tmp_path / "trt")


def test_tensorrt_variant_places_a_given_engine_instead_of_the_onnx_file(tmp_path) -> None:
    plan = tmp_path / "engine.plan"
    plan.write_bytes(b"not a real engine; placement only")
    out = tmp_path / "trt"
    write_variant("tensorrt", out, plans={"encoder": plan})
    assert (out / "encoder" / "1" / "model.plan").read_bytes() == plan.read_bytes()
    assert not (out / "encoder" / "1" / "model.onnx").exists()
    write_variant("tensorrt", out)  # regenerating keeps the engine an export placed there
    assert (out / "encoder" / "1" / "model.plan").is_file()


def test_the_committed_repository_is_never_overwritten() -> None:
    with pytest.raises(VariantError, match="refusing"):
        write_variant("gpu", MODEL_REPOSITORY)


def test_cli_writes_the_variant_and_fails_non_zero_on_errors(tmp_path) -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "tools.repo.variant", "--kind", "gpu", "--out", str(tmp_path / "gpu")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    assert "encoder: onnxruntime_onnx on KIND_GPU" in ok.stderr
    failed = subprocess.run(
        [sys.executable, "-m", "tools.repo.variant", "--kind", "tensorrt", "--out", str(tmp_path / "trt")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert failed.returncode == 1 and "model.plan" in failed.stderr


def test_a_ragged_source_becomes_the_buckets_policy_in_the_gpu_variants(tmp_path) -> None:
    from tools.repo.length_policy import policy_of, write_policy_repository

    ragged = write_policy_repository("ragged", tmp_path / "ragged")
    assert policy_of(load_config(ragged / "tokenizer"), load_config(ragged / "encoder")) == "ragged"
    out = tmp_path / "gpu"
    write_variant("gpu", out, ragged)
    tokenizer, encoder = load_config(out / "tokenizer"), load_config(out / "encoder")
    assert policy_of(tokenizer, encoder) == "buckets", "NVIDIA's native backend cannot take this model's inputs ragged"
    assert not any(item.allow_ragged_batch for item in encoder.input)
    assert encoder.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_GPU
    assert encoder.dynamic_batching == load_config(ragged / "encoder").dynamic_batching, "batching stays as committed"
