"""The quality gate on real encoders (the exported fp32 graph; no server): identical models
score 1.0, damaged or carelessly quantized ones are refused with their figures."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from export.precision import weight_matmuls
from export.quality_gate import QualityGateError, QualityReport, QualityThresholds, compare, embed_texts, enforce
from export.quality_texts import text_sets
from export.serving_tokenizer import serving_tokenizer
from export.source_model import default_model_dir, inspect_model
from tools.paths import MODEL_REPOSITORY
from tools.repo.model_config import load_config

ENCODER = MODEL_REPOSITORY / "encoder" / "1" / "model.onnx"


@pytest.fixture(scope="module")
def held_out():
    """Tokenizer, serving padding and held-out texts exactly as `python -m export` uses them."""
    tokenizer = serving_tokenizer(inspect_model(default_model_dir()))
    multiple = int(load_config(MODEL_REPOSITORY / "tokenizer").parameters["pad_to_multiple_of"].string_value or 1)
    sets = text_sets()
    return tokenizer, multiple, sets.held_out, sets.held_out_languages


@pytest.fixture(scope="module")
def fp32_embeddings(held_out) -> np.ndarray:
    tokenizer, multiple, texts, _ = held_out
    return embed_texts(ENCODER, tokenizer, texts, multiple)


def gate_report(candidate, held_out, fp32_embeddings) -> QualityReport:
    tokenizer, multiple, texts, languages = held_out
    return compare(fp32_embeddings, embed_texts(candidate, tokenizer, texts, multiple), languages)


def test_the_fp32_encoder_against_itself_scores_one(held_out, fp32_embeddings) -> None:
    report = gate_report(ENCODER, held_out, fp32_embeddings)
    assert report.texts == 320
    assert report.min_cosine == pytest.approx(1.0, abs=1e-5)
    assert set(report.min_cosine_by_language) == {"english", "chinese"}
    assert report.neighbour_overlap == 1.0
    assert report.top1_agreement == 1.0
    enforce(report, QualityThresholds())  # passes: no exception


def perturbed(tmp_path, relative_noise: float):
    """The fp32 encoder with Gaussian noise added to every weight matrix."""
    model = onnx.load(str(ENCODER))
    names = {init.name for init in model.graph.initializer}
    weights = {node.input[1] for node in model.graph.node if node.op_type == "MatMul" and node.input[1] in names}
    assert len(weights) == len(weight_matmuls(model))
    rng = np.random.default_rng(0)
    for initializer in model.graph.initializer:
        if initializer.name in weights:
            array = numpy_helper.to_array(initializer)
            noisy = array + rng.normal(scale=relative_noise * array.std(), size=array.shape).astype(array.dtype)
            initializer.CopyFrom(numpy_helper.from_array(noisy, initializer.name))
    path = tmp_path / "damaged.onnx"
    onnx.save(model, str(path))
    return path


def test_an_encoder_with_perturbed_weights_is_refused_with_its_figures(held_out, fp32_embeddings, tmp_path, caplog) -> None:
    report = gate_report(perturbed(tmp_path, relative_noise=0.3), held_out, fp32_embeddings)
    with pytest.raises(QualityGateError, match=r"fails the quality gate \(min cosine 0\.\d+ < 0\.99.*top-10 neighbour overlap") as error:
        enforce(report, QualityThresholds(), "damaged")
    assert "Nothing was written" in str(error.value) and "--accept-quality-loss" in str(error.value)
    with caplog.at_level(logging.WARNING):
        enforce(report, QualityThresholds(), "damaged", accept_quality_loss=True)  # the explicit flag lets it through
    assert "below the quality gate" in caplog.text


def test_onnx_runtimes_default_dynamic_quantization_is_refused(held_out, fp32_embeddings, tmp_path) -> None:
    """Every MatMul and the embedding table, per-tensor scales: the configuration once
    measured at a mean cosine of 0.95 on an AVX2 machine."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    naive = tmp_path / "naive_int8.onnx"
    quantize_dynamic(ENCODER, naive, weight_type=QuantType.QInt8)
    report = gate_report(naive, held_out, fp32_embeddings)
    assert report.min_cosine < 0.99
    with pytest.raises(QualityGateError, match="min cosine"):
        enforce(report, QualityThresholds(), "default int8")


def test_fp16_keeps_the_served_interface_fp32_and_passes_the_gate(held_out, fp32_embeddings, tmp_path) -> None:
    """The configs declare INT64 inputs and an FP32 output: fp16 must not change them."""
    from export.precision import convert_fp16

    fp16 = tmp_path / "fp16.onnx"
    kept = convert_fp16(ENCODER, fp16)
    model = onnx.load(str(fp16))
    assert [item.type.tensor_type.elem_type for item in model.graph.input] == [onnx.TensorProto.INT64] * 2
    assert [item.type.tensor_type.elem_type for item in model.graph.output] == [onnx.TensorProto.FLOAT]
    types = {init.name: init.data_type for init in model.graph.initializer}
    matmul_weights = [types[node.input[1]] for node in model.graph.node if node.op_type == "MatMul" and node.input[1] in types]
    assert len(matmul_weights) == 36 and set(matmul_weights) == {onnx.TensorProto.FLOAT16}
    assert "ReduceL2" in {node.op_type for node in model.graph.node if node.name in set(kept)}
    report = gate_report(fp16, held_out, fp32_embeddings)
    assert report.min_cosine >= 0.999 and not report.failures(QualityThresholds())
