"""`python -m export --precision int8` into a temporary repository copy, served by the real
local Triton (our Python-based onnxruntime backend). The committed repository's fp32 model
is never touched, so the other tests keep serving it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as http_client
from tritonclient.utils import InferenceServerException

from export.manifest import file_digest
from export.quality_texts import text_sets
from tests.conftest import start_triton
from tests.unit.test_repository_check import copy_configs
from tools.embed import EmbeddingClient
from tools.load.requests import token_tensors
from tools.paths import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

# The gate this test exports under. int8 dynamic quantization's error depends on the CPU's
# kernels: min cosine 0.995 on a VNNI Xeon, 0.9855 on an AVX2-only EPYC (where the default
# 0.99 gate refuses it, as it should). What is tested is that the export records its gate and
# that Triton serves what the gate let through, on any of these machines.
GATE_MIN_COSINE = 0.98
INT8 = ("--precision", "int8", "--min-cosine", str(GATE_MIN_COSINE))

TEXTS = [
    "A man is eating food.",
    "Triton joins requests into batches.",
    "今天天气很好。",
    "机器学习模型的推理服务需要低延迟和高吞吐量。",
    "short",
    "A somewhat longer English sentence, to make the padded batch ragged before padding, about serving.",
]


def export(repository: Path, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "export", "--repository", str(repository), "--skip-llm", *args]  # the encoder only
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=840)


@pytest.fixture(scope="module")
def int8_repository(tmp_path_factory) -> Path:
    repository = tmp_path_factory.mktemp("int8_repository")
    copy_configs(repository)
    result = export(repository, *INT8)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "quality gate: 320 held-out texts" in result.stderr
    return repository


def manifest(repository: Path) -> dict:
    return json.loads((repository / "encoder" / "1" / "export_manifest.json").read_text())


def test_the_int8_export_records_its_precision_and_gate_figures(int8_repository) -> None:
    recorded = manifest(int8_repository)
    assert recorded["settings"]["precision"] == "int8"
    assert recorded["settings"]["int8_method"] == "dynamic"
    assert recorded["quality"]["passed"] is True
    assert recorded["quality"]["min_cosine"] >= GATE_MIN_COSINE
    assert recorded["quality"]["neighbour_overlap"] >= 0.9


def test_exporting_the_same_precision_again_is_a_no_op(int8_repository) -> None:
    again = export(int8_repository, *INT8)
    assert again.returncode == 0, again.stderr
    assert "up to date" in again.stderr


def test_triton_serves_the_int8_encoder_within_the_gate(int8_repository, reference_model, tmp_path) -> None:
    server = start_triton(tmp_path / "triton.log", model_repository=int8_repository)
    try:
        texts = TEXTS + list(text_sets().held_out[::40])
        client = EmbeddingClient("http", server.options.http_url)
        served = client.embed(texts)
        client.close()
        expected = reference_model.encode(texts, convert_to_numpy=True)
        cosine = np.sum(served * expected, axis=1) / (np.linalg.norm(served, axis=1) * np.linalg.norm(expected, axis=1))
        assert served.shape == (len(texts), 384) and served.dtype == np.float32
        assert cosine.min() >= GATE_MIN_COSINE, cosine
        # the quantized graph keeps the embedding lookup the backend checks token ids against
        encoder = http_client.InferenceServerClient(server.options.http_url)
        with pytest.raises(InferenceServerException, match="outside the embedding table"):
            encoder.infer("encoder", token_tensors(http_client, [[101, 40_000, 102]]))
        encoder.close()
    finally:
        server.stop()


def test_a_variant_below_the_gate_is_refused_and_nothing_is_written(int8_repository) -> None:
    onnx_file = int8_repository / "encoder" / "1" / "model.onnx"
    manifest_file = onnx_file.with_name("export_manifest.json")
    before = file_digest(onnx_file), file_digest(manifest_file)
    refused = export(int8_repository, "--precision", "int8", "--int8-method", "static", "--min-cosine", "0.9999")
    assert refused.returncode == 3, refused.stderr[-3000:]
    assert "fails the quality gate (min cosine" in refused.stderr and "< 0.9999)" in refused.stderr
    assert "top-10 neighbour overlap" in refused.stderr and "Nothing was written" in refused.stderr
    assert (file_digest(onnx_file), file_digest(manifest_file)) == before
