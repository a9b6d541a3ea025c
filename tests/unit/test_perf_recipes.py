"""perf_analyzer interop without a server: its CSV (a file perf_analyzer 2.40 wrote) and ours,
the input-data files for `embed` and `encoder`, and Triton without a response cache."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

from tools.bench.perf_inputs import write_inputs
from tools.loadgen.perf_csv import COLUMNS, read_perf_csv, write_perf_csv
from tools.loadgen.report import LatencySummary, LoadResult, ServerWindow
from tools.serve.local_triton import ServerOptions, TritonInstallation, build_command

GOLDEN = Path(__file__).parent / "data" / "perf_analyzer_2.40.csv"


def result(traffic: str, latencies_ms: list[float]) -> LoadResult:
    window = ServerWindow(10, 10, 5, 2.0, {2: 5}, 1.5, 20.0, 0, 0)
    return LoadResult(
        traffic,
        "embed",
        "grpc",
        1.0,
        1,
        True,
        len(latencies_ms),
        {"ok": len(latencies_ms)},
        10.0,
        10.0,
        LatencySummary.of(np.array(latencies_ms) / 1000) if latencies_ms else LatencySummary(),
        {},
        0,
        0.0,
        {"tokenizer": window, "encoder": window},
    )


def test_perf_analyzers_own_csv_is_read() -> None:
    rows = read_perf_csv(GOLDEN)
    assert [(r["level"], round(r["throughput_rps"], 2), r["p50_ms"]) for r in rows] == [(1, 39.14, 23.47), (4, 45.93, 77.453)]


def test_our_csv_has_perf_analyzers_columns_and_reads_back(tmp_path) -> None:
    path = write_perf_csv([result("concurrency 1", [20, 22, 30]), result("concurrency 16", [])], tmp_path / "loadgen.csv")
    assert path.read_text().splitlines()[0] == GOLDEN.read_text().splitlines()[0] == ",".join(COLUMNS)
    first, empty = read_perf_csv(path)
    assert first["level"] == 1 and first["throughput_rps"] == 10.0 and abs(first["p50_ms"] - 22.0) < 0.01
    assert empty["level"] == 16 and empty["p50_ms"] is None, "no samples: no value"


def test_open_loop_levels_use_perf_analyzers_request_rate_column(tmp_path) -> None:
    path = write_perf_csv([result("poisson 40 req/s", [10.0])], tmp_path / "rate.csv")
    assert path.read_text().startswith("Request Rate,Inferences/Second,")
    assert read_perf_csv(path)[0]["level"] == 40


def test_input_data_files_follow_the_model_configs(tmp_path) -> None:
    files = write_inputs(tmp_path, tmp_path / "repository", sequence_length=32, entries=10, max_concurrency=16)
    embed = json.loads(files["embed"].read_text())["data"]
    assert len(embed) == 10 and all(entry["TEXT"]["shape"] == [1] and entry["TEXT"]["content"][0] for entry in embed)
    encoder = json.loads(files["encoder"].read_text())["data"]
    assert all(len(entry["INPUT_IDS"]["content"]) == entry["INPUT_IDS"]["shape"][0] == 32 for entry in encoder)
    assert all(entry["INPUT_IDS"]["content"][0] == 101 for entry in encoder), "[CLS] first: the model's own tokenizer"
    analyzer = yaml.safe_load(files["model-analyzer-encoder"].read_text())
    assert analyzer["profile_models"] == {"encoder": {"perf_analyzer_flags": {"input-data": str(files["encoder"].resolve())}}}
    assert analyzer["triton_launch_mode"] == "docker" and analyzer["model_repository"] == str((tmp_path / "repository").resolve())


def test_a_cache_size_of_zero_starts_triton_without_a_response_cache(tmp_path) -> None:
    installation = TritonInstallation(tmp_path)
    without = build_command(ServerOptions(cache_size_bytes=0), installation, tmp_path)
    assert not any(part.startswith("--cache") for part in without)
    assert "--cache-config=local,size=1048576" in build_command(ServerOptions(cache_size_bytes=1 << 20), installation, tmp_path)


def test_a_server_that_executed_nothing_leaves_its_cells_empty(tmp_path) -> None:
    idle = result("concurrency 1", [])
    for window in idle.server.values():
        window.average_queue_ms = window.average_compute_ms = None
    path = write_perf_csv([idle], tmp_path / "idle.csv")
    assert path.read_text().splitlines()[1] == "1,10.0000,0,,,,,,0,,,,"
