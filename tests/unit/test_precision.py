"""Precision options: the gate's metrics, the text sets, node choices, manifest and arguments (no server)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from export.cli import PrecisionRequest, check_tensorrt_precision, expected_manifest, parse_args, run
from export.errors import ExportError
from export.manifest import ExportManifest, stale_reasons
from export.precision import PrecisionSpec, int8_nodes, pooling_nodes, weight_matmuls
from export.quality_gate import QualityThresholds, compare, nearest_neighbours
from export.quality_texts import text_sets
from export.source_model import default_model_dir, inspect_model
from tools.paths import MODEL_REPOSITORY

ENCODER = MODEL_REPOSITORY / "encoder" / "1" / "model.onnx"


def random_embeddings(rows: int = 60, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(rows, 16)).astype(np.float32)


def languages(rows: int) -> list[str]:
    return ["english"] * (rows // 2) + ["chinese"] * (rows - rows // 2)


def test_identical_embeddings_score_one_on_every_gate_metric() -> None:
    embeddings = random_embeddings()
    report = compare(embeddings, embeddings.copy(), languages(60))
    assert report.min_cosine == pytest.approx(1.0, abs=1e-6)
    assert report.mean_cosine == pytest.approx(1.0, abs=1e-6)
    assert report.neighbour_overlap == 1.0
    assert report.top1_agreement == 1.0
    assert report.failures(QualityThresholds()) == []


def test_one_text_far_from_fp32_fails_the_cosine_minimum_with_its_language() -> None:
    reference = random_embeddings()
    candidate = reference.copy()
    candidate[45] = -candidate[45]  # a chinese row
    report = compare(reference, candidate, languages(60))
    assert report.min_cosine == pytest.approx(-1.0, abs=1e-6)
    assert report.min_cosine_by_language["english"] == pytest.approx(1.0, abs=1e-6)
    assert report.mean_cosine > 0.9
    assert any("min cosine" in problem for problem in report.failures(QualityThresholds()))


def on_circle(degrees: list[float]) -> np.ndarray:
    radians = np.radians(degrees)
    return np.stack([np.cos(radians), np.sin(radians)], axis=1).astype(np.float32)


def test_neighbour_overlap_counts_the_fp32_neighbours_a_ranking_keeps() -> None:
    reference = on_circle([0, 10, 50, 60, 120, 130])  # nearest neighbours: pairs (0, 10), (50, 60), (120, 130)
    assert nearest_neighbours(reference, 1)[:, 0].tolist() == [1, 0, 3, 2, 5, 4]
    candidate = on_circle([0, 10, 50, 100, 120, 130])  # 60 moves to 100: 50 now nearest to 10, 100 to 120
    report = compare(reference, candidate, languages(6), neighbours=1)
    assert report.neighbour_overlap == pytest.approx(4 / 6)
    assert report.top1_agreement == pytest.approx(4 / 6)
    assert report.failures(QualityThresholds(min_cosine=0.5)) == ["top-1 neighbour overlap 0.667 < 0.9"]


def test_calibration_and_held_out_texts_share_no_text_and_no_sentence() -> None:
    sets = text_sets()
    assert sets == text_sets()  # deterministic
    assert not set(sets.calibration) & set(sets.held_out)
    ends = (".", "?", "。", "？")
    sentences = [text for text in sets.calibration if text.endswith(ends) and not any(end in text[:-1] for end in ends)]
    assert len(sentences) > 30
    assert not [sentence for sentence in sentences if any(sentence in text for text in sets.held_out)]
    assert set(sets.held_out_languages) == {"english", "chinese"}
    assert sets.held_out_languages.count("english") == sets.held_out_languages.count("chinese") == len(sets.held_out) // 2


def test_held_out_texts_mix_keywords_sentences_and_passages_in_both_languages() -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(default_model_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    sets = text_sets()
    for language in ("english", "chinese"):
        texts = [text for text, label in zip(sets.held_out, sets.held_out_languages) if label == language]
        lengths = np.array([len(encoding.ids) for encoding in tokenizer.encode_batch(texts)])
        assert 0.25 <= np.mean(lengths >= 100) <= 0.35, language  # passages
        assert np.mean(lengths <= 40) >= 0.6, language  # queries and sentences
        assert np.mean(lengths <= 10) >= 0.1, language  # keyword queries


def test_int8_quantizes_only_the_square_matmuls_and_keeps_the_feed_forward_fp32() -> None:
    model = onnx.load(str(ENCODER), load_external_data=False)
    weights = weight_matmuls(model)
    assert len(weights) == 36  # 6 layers x (query, key, value, attention output, up, down)
    chosen = int8_nodes(model)
    assert len(chosen) == 24 and all(weights[name] == (384, 384) for name in chosen)
    assert not [name for name in chosen if "intermediate" in name or ("/output/dense" in name and "attention" not in name)]


def test_fp16_keeps_pooling_and_normalisation_after_the_last_layer_norm() -> None:
    model = onnx.load(str(ENCODER), load_external_data=False)
    kept = {node.name: node.op_type for node in model.graph.node if node.name in set(pooling_nodes(model))}
    assert {"ReduceSum", "ReduceL2", "Div"} <= set(kept.values())
    assert "LayerNormalization" not in kept.values() and "MatMul" not in kept.values()


@pytest.fixture(scope="module")
def source_model():
    return inspect_model(default_model_dir())


def written(manifest: ExportManifest, tmp_path) -> ExportManifest:
    manifest.save(tmp_path / "manifest.json")
    return ExportManifest.load(tmp_path / "manifest.json")


def test_changing_the_precision_redoes_the_export_and_keeping_it_does_not(source_model, tmp_path) -> None:
    int8 = written(expected_manifest(source_model, PrecisionSpec("int8")), tmp_path)
    assert stale_reasons(int8, expected_manifest(source_model, PrecisionSpec("int8")), tmp_path) == []
    (reason,) = stale_reasons(int8, expected_manifest(source_model, PrecisionSpec("fp32")), tmp_path)
    assert "precision: int8 -> fp32" in reason
    (reason,) = stale_reasons(int8, expected_manifest(source_model, PrecisionSpec("int8", "static"), ("a", "b")), tmp_path)
    assert "int8_method: dynamic -> static" in reason


def test_new_calibration_texts_redo_a_static_export(source_model, tmp_path) -> None:
    static = written(expected_manifest(source_model, PrecisionSpec("int8", "static"), ("a", "b")), tmp_path)
    assert stale_reasons(static, expected_manifest(source_model, PrecisionSpec("int8", "static"), ("a", "b")), tmp_path) == []
    (reason,) = stale_reasons(static, expected_manifest(source_model, PrecisionSpec("int8", "static"), ("a", "c")), tmp_path)
    assert "calibration" in reason


def test_an_export_made_before_precisions_existed_counts_as_fp32(source_model, tmp_path) -> None:
    legacy = expected_manifest(source_model, PrecisionSpec("fp32"))
    del legacy.settings["precision"]
    legacy = written(legacy, tmp_path)
    assert stale_reasons(legacy, expected_manifest(source_model, PrecisionSpec("fp32")), tmp_path) == []
    assert stale_reasons(legacy, expected_manifest(source_model, PrecisionSpec("int8")), tmp_path)


def request(*argv: str) -> PrecisionRequest:
    return PrecisionRequest.from_cli_args(parse_args(list(argv)))


def test_precision_defaults_to_fp32_with_the_documented_gate() -> None:
    default = request()
    assert default.spec == PrecisionSpec("fp32") and not default.explicit and not default.accept_quality_loss
    assert default.thresholds == QualityThresholds(min_cosine=0.99, min_neighbour_overlap=0.9, neighbours=10)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--precision", "fp16", "--int8-method", "static"], "--int8-method applies to --precision int8"),
        (["--precision", "int8", "--min-cosine", "1.5"], "gate thresholds must lie in"),
        (["--precision", "int8", "--min-neighbour-overlap", "-0.1"], "gate thresholds must lie in"),
    ],
)
def test_bad_precision_arguments_exit_2_before_anything_starts(argv, message, tmp_path, caplog) -> None:
    with pytest.raises(ExportError, match=message):
        request(*argv)
    assert run([*argv, "--repository", str(tmp_path)]) == 2
    assert message in caplog.text


def test_tensorrt_builds_fp16_from_fp32_unless_fp32_is_asked_for(source_model, tmp_path) -> None:
    manifest_path = tmp_path / "manifest.json"
    expected_manifest(source_model, PrecisionSpec("fp32")).save(manifest_path)
    assert check_tensorrt_precision(manifest_path, request("--target", "tensorrt")) is True
    assert check_tensorrt_precision(manifest_path, request("--target", "tensorrt", "--precision", "fp16")) is True
    assert check_tensorrt_precision(manifest_path, request("--target", "tensorrt", "--precision", "fp32")) is False
    with pytest.raises(ExportError, match="applies to the ONNX export"):
        check_tensorrt_precision(manifest_path, request("--target", "tensorrt", "--precision", "int8"))


def test_tensorrt_refuses_a_repository_holding_an_int8_graph(source_model, tmp_path) -> None:
    manifest_path = tmp_path / "manifest.json"
    expected_manifest(source_model, PrecisionSpec("int8")).save(manifest_path)
    with pytest.raises(ExportError, match="holds a int8 ONNX export"):
        check_tensorrt_precision(manifest_path, request("--target", "tensorrt"))
