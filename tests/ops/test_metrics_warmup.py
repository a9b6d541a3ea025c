"""`make metrics` leaves the warm-up out: Triton 2.51 counts `model_warmup` runs as requests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import start_triton
from tools.embed import EmbeddingClient
from tools.observe.metrics_summary import ModelMetrics, WarmUp, fetch_warmup, read_server, summary_rows, warmup_of, without_warmup
from tools.repo.model_config import parse_config
from tools.serve.local_triton import ServerOptions, triton_client
from tools.triton_client.stats import ModelStats

TWO_GROUPS = """
name: "m"
max_batch_size: 8
instance_group { count: 2 kind: KIND_CPU }
instance_group { kind: KIND_CPU }
model_warmup { name: "one" batch_size: 1 }
model_warmup { name: "eight" batch_size: 8 count: 2 }
"""


def test_warmup_runs_every_sample_on_every_instance_for_its_iterations() -> None:
    warmup = warmup_of(parse_config(TWO_GROUPS))
    assert warmup.batches == {1: 3, 8: 6}  # 3 instances; the 8-row sample twice each
    assert (warmup.requests, warmup.executions) == (3 * 1 + 6 * 8, 9)


def test_a_model_without_warmup_has_none() -> None:
    assert warmup_of(parse_config('name: "m"')) == WarmUp()


def test_counts_lose_the_warmup_but_never_go_below_what_the_server_reports() -> None:
    metrics = ModelMetrics()
    metrics.values.update({"nv_inference_request_success": 25.0, "nv_inference_count": 25.0, "nv_inference_exec_count": 6.0})
    stats = ModelStats(requests=25, inferences=25, executions=6, batch_executions={1: 5, 8: 1, 4: 0})
    counts, traffic, removed = without_warmup(metrics, stats, WarmUp(requests=18, executions=4, batches={1: 2, 8: 2}))
    assert removed == 2 * 1 + 1 * 8  # only one 8-row execution was reported: only one is removed
    assert counts.values["nv_inference_request_success"] == 15.0 and counts.values["nv_inference_exec_count"] == 3.0
    assert traffic.batch_executions == {1: 3} and traffic.executions == 3


@pytest.fixture(scope="module")
def fresh_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerOptions]:
    """A server nobody else sends to: what it counted before the test is its warm-up alone."""
    server = start_triton(tmp_path_factory.mktemp("metrics-warmup") / "triton.log")
    try:
        yield server.options
    finally:
        server.stop()


@pytest.mark.integration
def test_a_fresh_server_reports_no_traffic_and_then_exactly_the_requests_sent(fresh_triton: ServerOptions) -> None:
    warmup = fetch_warmup(triton_client(fresh_triton.http_url, metrics_url=fresh_triton.metrics_url), "encoder")
    assert warmup.executions > 0, "the committed encoder config warms up"
    raw = ModelStats.settled(fresh_triton.http_url, "encoder")
    assert raw.requests == warmup.requests and raw.executions == warmup.executions, "precondition: Triton counts its warm-up"

    rows = {
        row["model"]: row for row in summary_rows(read_server(triton_client(fresh_triton.http_url, metrics_url=fresh_triton.metrics_url)))
    }
    assert rows["encoder"]["requests"] == 0 and rows["encoder"]["warm-up"] == warmup.requests
    assert rows["encoder"]["total ms"] is None and rows["encoder"]["avg batch"] is None, "no traffic: no value"
    assert rows["encoder"]["batches (size x n)"] == "-"

    sent = 5
    with EmbeddingClient("http", fresh_triton.http_url) as client:
        for index in range(sent):
            client.embed([f"warm-up is not traffic, request {index}"])
    for model in ("embed", "encoder"):
        ModelStats.settled(fresh_triton.http_url, model)
    rows = {
        row["model"]: row for row in summary_rows(read_server(triton_client(fresh_triton.http_url, metrics_url=fresh_triton.metrics_url)))
    }
    assert rows["embed"]["requests"] == sent and rows["embed"]["warm-up"] == 0
    assert rows["encoder"]["requests"] == sent, rows["encoder"]
    assert rows["encoder"]["total ms"] is not None
