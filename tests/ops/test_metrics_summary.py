"""`make metrics` (python -m tools.observe.metrics_summary) against the real local Triton."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tools.embed import EmbeddingClient
from tools.observe.metrics_summary import metrics_by_model, read_server, summary_rows
from tools.paths import REPO_ROOT
from tools.ports import free_ports
from tools.serve.local_triton import ServerOptions, triton_client
from tools.triton_client import parse_metrics
from tools.triton_client.stats import ModelStats


def test_parser_reads_labels_and_failure_reasons() -> None:
    text = (
        "# TYPE x counter\n"
        'nv_inference_request_failure{model="m",reason="REJECTED",version="1"} 3\n'
        'nv_inference_count{model="m",version="1"} 7\n'
    )
    assert parse_metrics(text)[1] == ("nv_inference_count", {"model": "m", "version": "1"}, 7.0)
    models = metrics_by_model(parse_metrics(text))
    assert models["m"].failures == {"REJECTED": 3.0}


def test_unreachable_server_fails_non_zero_with_a_hint() -> None:
    (port,) = free_ports(1)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.observe.metrics_summary",
            "--url",
            f"127.0.0.1:{port}",
            "--metrics-url",
            f"http://127.0.0.1:{port}/metrics",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and "make serve" in result.stderr


def settled_snapshot(triton: ServerOptions):
    """A snapshot once every model's counters stopped moving: Triton may record a request
    after its response reached the client, so an earlier read can miss it (or count the
    previous test's last request in this window)."""
    for model in ("embed", "tokenizer", "encoder"):
        ModelStats.settled(triton.http_url, model)
    return read_server(triton_client(triton.http_url, metrics_url=triton.metrics_url))


@pytest.mark.integration
def test_window_figures_count_exactly_the_requests_sent(triton: ServerOptions) -> None:
    client = EmbeddingClient("http", triton.http_url)
    before = settled_snapshot(triton)
    for index in range(6):
        client.embed(["a repeated request"] if index % 2 else [f"metrics summary text {index} {time.time_ns()}", "another"])
    rows = {row["model"]: row for row in summary_rows(settled_snapshot(triton), before)}
    client.close()
    assert rows["embed"]["requests"] == 6 and rows["embed"]["failed"] == 0
    assert rows["tokenizer"]["avg batch"] >= 1.0
    assert rows["encoder"]["queue ms"] is not None and rows["encoder"]["compute ms"] > 0
    assert rows["embed"]["cache hit"] is not None and rows["embed"]["cache hit"] > 0  # the cache key is the whole request


@pytest.mark.integration
def test_cli_prints_one_row_per_model(triton: ServerOptions) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tools.observe.metrics_summary", "--url", triton.http_url, "--metrics-url", triton.metrics_url],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "avg batch" in lines[1] and "queue ms" in lines[1]
    assert {line.split()[0] for line in lines[2:]} == {"embed", "encoder", "tokenizer"}
