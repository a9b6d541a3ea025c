"""The perf_analyzer recipe's pieces against the live Triton: our input data is what the models
take, and `tools.loadgen --csv` writes a perf_analyzer CSV of a real run."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tools.bench.perf_inputs import write_inputs
from tools.embed import EmbeddingClient
from tools.loadgen.perf_csv import read_perf_csv
from tools.paths import REPO_ROOT

pytestmark = pytest.mark.integration


def test_input_data_files_are_accepted_by_the_served_models(triton, tmp_path) -> None:
    files = write_inputs(tmp_path, tmp_path / "repository", sequence_length=64, entries=6, max_concurrency=4)
    texts = [entry["TEXT"]["content"][0] for entry in json.loads(files["embed"].read_text())["data"]]
    client = EmbeddingClient("grpc", triton.grpc_url)
    assert client.embed(texts).shape == (6, 384)
    client.close()
    entry = json.loads(files["encoder"].read_text())["data"][0]
    inputs = []
    for name in ("INPUT_IDS", "ATTENTION_MASK"):
        tensor = grpcclient.InferInput(name, [1, *entry[name]["shape"]], "INT64")
        tensor.set_data_from_numpy(np.array([entry[name]["content"]], dtype=np.int64))
        inputs.append(tensor)
    with grpcclient.InferenceServerClient(triton.grpc_url) as raw:
        assert raw.infer("encoder", inputs).as_numpy("EMBEDDING").shape == (1, 384)


def test_loadgen_writes_a_perf_analyzer_csv_of_a_real_run(triton, tmp_path) -> None:
    command = [
        sys.executable,
        "-m",
        "tools.loadgen",
        "--url",
        triton.http_url,
        "--grpc-url",
        triton.grpc_url,
        "--concurrency",
        "1,2",
        "--warmup",
        "0.3",
        "--window",
        "0.8",
        "--max-windows",
        "3",
        "--csv",
        str(tmp_path / "loadgen.csv"),
    ]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=200)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = read_perf_csv(tmp_path / "loadgen.csv")
    assert [row["level"] for row in rows] == [1, 2]
    assert all(row["throughput_rps"] > 0 and 0 < row["p50_ms"] <= row["p99_ms"] for row in rows)
