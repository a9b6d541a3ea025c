"""Queue timeouts of the committed configs, live on the real local Triton.

A request whose timeout expires while it waits in a queue is rejected with Triton's
"Request timeout expired" (HTTP 503 / gRPC UNAVAILABLE) and never runs; the requests
queued around it are served. Backlogs are confirmed through the server's pending-request
gauge, and timeouts and amounts of work derive from the measured execution time, so no
test depends on how fast the machine is.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tools.embed import EmbeddingClient, client_module
from tools.load.requests import token_tensors
from tools.loadgen.curve import encoder_batch, measure_curve
from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.repo.model_config import load_config
from tools.serve.local_triton import ServerOptions
from tools.triton_client import fetch_metrics, metric_total
from tools.triton_client.stats import ModelStats

pytestmark = pytest.mark.integration

# A backlog request fills a whole batch (nothing joins it), so each one is one execution.
ROWS = load_config(MODEL_REPOSITORY / "encoder").max_batch_size
SHORT, LONG = 64, 256  # tokens per row: short executions keep a queue of them far inside the 30 s bulk timeout
TIMEOUT_MESSAGE = "Request timeout expired"


def outcome(call: Callable[[], object]) -> str:
    """'ok', or the error as the client shows it: `[<HTTP status or gRPC code>] <server's message>`."""
    try:
        call()
        return "ok"
    except InferenceServerException as exc:
        return str(exc)


def encoder_request(url: str, priority: int, timeout_us: int | None = None, rows: int = 1, tokens: int = SHORT) -> str:
    module = client_module("grpc")
    client = module.InferenceServerClient(url)
    ids = np.random.default_rng().integers(1000, 30_000, size=(rows, tokens), dtype=np.int64)
    try:
        return outcome(lambda: client.infer("encoder", token_tensors(module, ids), priority=priority, timeout=timeout_us))
    finally:
        client.close()


def embed_request(url: str, priority: int, timeout_us: int | None = None) -> str:
    client = EmbeddingClient("http", url)
    try:
        return outcome(lambda: client.embed([f"timeout probe {time.time_ns()}"], priority=priority, timeout_us=timeout_us))
    finally:
        client.close()


def encoder_instances() -> int:
    return sum(group.count for group in load_config(MODEL_REPOSITORY / "encoder").instance_group)


def execution_seconds(triton: ServerOptions, tokens: int) -> float:
    """How long one backlog request (a full batch) runs on this machine now, from the server's statistics."""
    (point,) = measure_curve(triton.http_url, "encoder", encoder_batch(tokens), [ROWS], repeats=1)
    return point.execution_ms / 1000.0


def queued(triton: ServerOptions, model: str) -> int:
    """Requests waiting in the model's queues now (Triton's pending-request gauge)."""
    return int(metric_total(fetch_metrics(triton.metrics_url), "nv_inference_pending_request_count", model=model))


def wait_until_queued(triton: ServerOptions, model: str, at_least: int, timeout_s: float = 60.0) -> int:
    deadline = time.monotonic() + timeout_s
    while (count := queued(triton, model)) < at_least:
        if time.monotonic() > deadline:
            pytest.fail(f"{model} never had {at_least} queued requests (last seen: {count})")
        time.sleep(0.01)
    return count


def timeouts_and_others(outcomes: list[str]) -> tuple[int, list[str]]:
    timeouts = sum(TIMEOUT_MESSAGE in o for o in outcomes)
    return timeouts, [o for o in outcomes if o != "ok" and TIMEOUT_MESSAGE not in o]


def test_a_request_whose_timeout_expires_in_the_queue_is_rejected_while_the_requests_around_it_are_served(triton) -> None:
    instances, execution_s = encoder_instances(), execution_seconds(triton, SHORT)
    # Every instance busy and more requests queued than there are instances: a probe queued
    # behind them waits at least one whole execution, however fast the machine. The backlog
    # stays a few executions long, well inside the bulk level's default timeout.
    backlog = 2 * instances + 4
    probe_timeout_us = max(1, int(execution_s * 1e6 / 4))
    before = ModelStats.settled(triton.http_url, "encoder")
    with concurrent.futures.ThreadPoolExecutor(backlog + 4) as pool:
        busy = [pool.submit(encoder_request, triton.grpc_url, 2, None, ROWS) for _ in range(backlog)]
        wait_until_queued(triton, "encoder", instances + 2)
        probes = {
            "encoder, timeout": pool.submit(encoder_request, triton.grpc_url, 2, probe_timeout_us),
            "encoder, none": pool.submit(encoder_request, triton.grpc_url, 2, None),
            "embed, timeout": pool.submit(embed_request, triton.http_url, 2, probe_timeout_us),
            "embed, none": pool.submit(embed_request, triton.http_url, 2, None),
        }
        answers = {name: future.result(timeout=240) for name, future in probes.items()}
        backlog_answers = [future.result(timeout=240) for future in busy]

    assert answers["encoder, timeout"] == f"[StatusCode.UNAVAILABLE] {TIMEOUT_MESSAGE}", answers
    # The ensemble has no queue of its own: it hands the request's timeout to its steps.
    assert answers["embed, timeout"] == f"[503] in ensemble 'embed', {TIMEOUT_MESSAGE}", answers
    assert answers["encoder, none"] == "ok" and answers["embed, none"] == "ok", answers
    assert backlog_answers == ["ok"] * backlog
    # Rows the encoder ran: the backlog and the two probes without a timeout; the expired ones never ran.
    assert (ModelStats.settled(triton.http_url, "encoder") - before).inferences == backlog * ROWS + 2


def test_an_interactive_request_left_waiting_beyond_the_level_1_default_is_rejected(triton) -> None:
    """No timeout on the requests: the committed priority-1 default applies."""
    policy = load_config(MODEL_REPOSITORY / "encoder").dynamic_batching.priority_queue_policy[1]
    default_s = policy.default_timeout_microseconds / 1e6
    instances, execution_s = encoder_instances(), execution_seconds(triton, LONG)
    # Six times the default's worth of work (in case the machine speeds up after the measurement)
    count = instances * math.ceil(6 * default_s / execution_s) + instances
    assert count <= policy.max_queue_size, "the backlog fits the queue (else some are refused as queue full)"
    before = ModelStats.settled(triton.http_url, "encoder")
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        answers = list(pool.map(lambda _: encoder_request(triton.grpc_url, 1, None, ROWS, LONG), range(count)))
    served = answers.count("ok")
    timeouts, others = timeouts_and_others(answers)
    assert served > 0 and timeouts > 0, answers
    assert others == [], "nothing else happens to them"
    assert (ModelStats.settled(triton.http_url, "encoder") - before).inferences == served * ROWS


def test_loadgen_timeout_option_reaches_the_server(triton, tmp_path) -> None:
    """1 us expires before any batcher can pick the request up: every request times out."""
    report = tmp_path / "loadgen.json"
    command = [
        sys.executable,
        "-m",
        "tools.loadgen",
        "--url",
        triton.http_url,
        "--grpc-url",
        triton.grpc_url,
        "--model",
        "embed",
        "--concurrency",
        "2",
        "--timeout-us",
        "1",
        "--warmup",
        "0.2",
        "--window",
        "1",
        "--max-windows",
        "1",
        "--json",
        str(report),
    ]
    completed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr[-2000:]
    (result,) = json.loads(report.read_text())
    assert set(result["run_outcomes"]) == {"timeout"} and result["run_outcomes"]["timeout"] > 0, result["run_outcomes"]


def test_locust_interactive_timeout_option_reaches_the_server(triton, tmp_path) -> None:
    """A 1 ms queue timeout is shorter than the tokenizer's batching delay, so an interactive
    request (alone in that queue) expires while the batcher waits for others to join it."""
    tokenizer = load_config(MODEL_REPOSITORY / "tokenizer").dynamic_batching
    assert tokenizer.max_queue_delay_microseconds > 1000, "precondition: the tokenizer holds a lone request over 1 ms"
    command = [
        sys.executable,
        "-m",
        "loadtest.run",
        "--no-start",
        "--run-time",
        "3",
        "--users",
        "2",
        "--repeat-share",
        "0",
        "--interactive-timeout-ms",
        "1",
        "--interactive-weight",
        "1",
        "--protocol",
        "http",
        "--report-dir",
        str(tmp_path),
        "--triton-http-url",
        triton.http_url,
        "--triton-grpc-url",
        triton.grpc_url,
    ]
    completed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=180)
    assert completed.returncode == 1, completed.stdout[-3000:] + completed.stderr[-2000:]  # the SLO verdict fails
    failures = (tmp_path / "locust_failures.csv").read_text()
    interactive = [line for line in failures.splitlines() if "embed/interactive" in line]
    assert interactive and all(TIMEOUT_MESSAGE in line for line in interactive), failures
    assert "embed/bulk" not in failures, "bulk requests carry no timeout of their own and are served"
