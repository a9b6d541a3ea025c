"""The LLM tools users come for, against the `llm` model on vLLM's engine inside the real Triton:
the OpenAI gateway (completions and chat, streaming, a client that leaves), locust's LLM users
with their SLO verdict, and the LLM soak (three streaming paths, disconnects, bad requests, a
burst refused on both bounds, the server idle at the end)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import start_gateway
from tests.integration.llm_streams import wait_until
from tools.contract import LLM_MODEL
from tools.paths import REPO_ROOT
from tools.reliability.llm.soak import LlmSoakReport, SoakSettings, Targets, run_llm_soak, soak_config
from tools.reliability.llm.traffic import CANCELLED, ERROR, OK, REJECTED
from tools.triton_client import fetch_metrics, metric_total

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]


@pytest.fixture(scope="module")
def vllm_gateway(vllm_triton, tmp_path_factory: pytest.TempPathFactory):
    process = start_gateway(vllm_triton.options.grpc_url, tmp_path_factory.mktemp("vllm-gateway") / "gateway.log")
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def client(vllm_gateway):
    client = openai.OpenAI(base_url=f"{vllm_gateway.url}/v1", api_key="none", max_retries=0, timeout=300)
    yield client
    client.close()


def test_the_gateways_chat_answers_from_vllm_and_its_stream_joins_to_the_same_text(client) -> None:
    whole = client.chat.completions.create(model=LLM_MODEL, messages=QUESTION, max_tokens=8, temperature=0)
    assert "Paris" in whole.choices[0].message.content
    assert whole.usage.completion_tokens == 8 or whole.choices[0].finish_reason == "stop"
    chunks = list(client.chat.completions.create(model=LLM_MODEL, messages=QUESTION, max_tokens=8, temperature=0, stream=True))
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == whole.choices[0].message.content


def test_the_gateways_completion_streams_and_counts_usage(client) -> None:
    chunks = list(
        client.completions.create(
            model=LLM_MODEL,
            prompt="The capital of France is",
            max_tokens=6,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(chunk.choices[0].text for chunk in chunks if chunk.choices).strip()
    usage = next(chunk.usage for chunk in chunks if chunk.usage)
    assert usage.prompt_tokens == 5 and usage.completion_tokens == 6


def test_a_client_that_leaves_the_gateway_aborts_its_request_in_vllm(vllm_gateway, vllm_triton) -> None:
    def aborted() -> float:
        return metric_total(fetch_metrics(vllm_triton.options.metrics_url), "vllm:request_success", finished_reason="abort")

    before = aborted()
    body = {"model": LLM_MODEL, "prompt": "Count from one to a thousand: one, two,", "max_tokens": 256, "temperature": 0, "stream": True}
    with httpx.Client(timeout=120) as http, http.stream("POST", f"{vllm_gateway.url}/v1/completions", json=body) as response:
        events = (line for line in response.iter_lines() if line.startswith("data: "))
        assert next(events) and next(events), "precondition: the generation is under way"
    assert wait_until(lambda: aborted() > before), "vLLM never counted an aborted request"
    assert wait_until(lambda: metric_total(fetch_metrics(vllm_triton.options.metrics_url), "vllm:num_requests_running") == 0)


def test_locusts_llm_users_stream_from_vllm_and_pass_a_generous_verdict(vllm_triton, tmp_path: Path) -> None:
    options = vllm_triton.options
    command = [sys.executable, "-m", "loadtest.run", "--workload", "llm", "--no-start", "--run-time", "10", "--users", "2"]
    command += ["--wait-ms", "0", "--llm-max-tokens", "8", "--report-dir", str(tmp_path)]
    command += ["--triton-http-url", options.http_url, "--triton-grpc-url", options.grpc_url]
    command += ["--slo-ttft-p99-ms", "60000", "--slo-itl-p99-ms", "60000"]  # the machinery, not this machine's speed
    completed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    with (tmp_path / "locust_stats.csv").open() as handle:
        rows = {(row["Type"], row["Name"]): row for row in csv.DictReader(handle)}
    streamed = [row for (kind, _), row in rows.items() if kind != "" and kind != "Aggregated" and int(row["Request Count"]) > 0]
    assert streamed, rows.keys()
    assert all(int(row["Failure Count"]) == 0 for row in streamed), streamed


@pytest.fixture(scope="module")
def soak(vllm_triton, tmp_path_factory: pytest.TempPathFactory) -> LlmSoakReport:
    settings = SoakSettings(duration_s=40.0, rate=0.5, window_s=10.0)
    client = vllm_triton.client
    committed = client.config(LLM_MODEL)
    with client.restoring(LLM_MODEL, committed):
        client.reload(LLM_MODEL, soak_config(client))
        folder = tmp_path_factory.mktemp("vllm-soak")
        gateway = start_gateway(vllm_triton.options.grpc_url, folder / "gateway.log", "--llm-max-streams", str(settings.gateway_streams))
        try:
            o = vllm_triton.options
            report = run_llm_soak(
                Targets(o.grpc_url, o.http_url, o.metrics_url, gateway.url, vllm_triton.pid, gateway.process.pid), settings
            )
        finally:
            gateway.stop()
    print(report.summary())
    return report


def test_the_llm_soak_passes_on_vllm_with_every_check_exercised(soak) -> None:
    report = soak
    assert report.passed, report.summary()
    for kind in ("grpc", "generate_stream", "openai_chat"):
        assert report.outcomes.get(kind, {}).get(OK, 0) >= 1, (kind, report.outcomes)
    bad = {kind: per for kind, per in report.outcomes.items() if kind.startswith("bad_")}
    assert bad and all(set(per) == {ERROR} for per in bad.values()), report.outcomes
    cancelled = sum(per.get(CANCELLED, 0) for per in report.outcomes.values())
    assert cancelled >= 1 and report.server_finished["abort"] == report.client_finished["abort"] == cancelled
    assert report.bursts["burst_grpc"].get(REJECTED, 0) >= 1, report.bursts
    assert report.end_state == {"kv_cache_usage_perc": 0.0, "num_requests_running": 0.0, "num_requests_waiting": 0.0}
