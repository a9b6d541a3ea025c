"""LLM load generation against the real server: each streaming API that Triton serves, and
`tools.loadgen --model llm` end to end. Few, short requests; it checks what is recorded, not
how fast the machine is."""

from __future__ import annotations

import csv
import json

import pytest

from tools.load.llm.clients import GenerateStreamClient, TritonStreamClient
from tools.load.llm.streaming import run_streaming
from tools.load.llm.workload import LengthRange, Workload
from tools.load.schedules import ClosedLoop, Phase
from tools.loadgen.__main__ import run
from tools.loadgen.llm.load import load_tokenizer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def requests():
    return Workload(LengthRange(8, 24), LengthRange(2, 6), count=4, seed=1).build(load_tokenizer())


@pytest.mark.parametrize("api", ["grpc", "generate-stream"])
def test_each_triton_streaming_api_records_every_token_of_every_request(llm_triton, requests, api: str) -> None:
    server = llm_triton
    client = TritonStreamClient(server.options.grpc_url) if api == "grpc" else GenerateStreamClient(server.options.http_url)
    run = run_streaming(client, requests, [Phase(ClosedLoop(2, requests=4), 120.0)], deadline_s=120.0)
    assert len(run.records) == 4
    for record, request in zip(run.records, requests, strict=True):
        assert record.completed and record.finish_reason == "length", record
        assert record.tokens_out == request.max_tokens  # EOS ignored: exactly the asked tokens came back
        assert record.tokens_in == request.prompt_tokens  # the server's count agrees with our tokenizer's
        assert record.sent_s < record.token_times[0] <= record.token_times[-1] <= record.end_s


def test_loadgen_measures_the_llm_and_writes_its_records_and_genai_perf_csv(llm_triton, tmp_path) -> None:
    server = llm_triton
    argv = [
        *("--model", "llm", "--url", server.options.http_url, "--grpc-url", server.options.grpc_url),
        *("--rate", "4", "--burstiness", "0.5", "--num-prompts", "4", "--prompt-tokens", "8-24", "--output-tokens", "2-6"),
        *("--json", str(tmp_path / "llm.json"), "--csv", str(tmp_path / "llm.csv"), "-q"),
    ]
    assert run(argv) == 0
    (level,) = json.loads((tmp_path / "llm.json").read_text())["levels"]
    assert level["figures"]["requests"] == level["figures"]["completed"] == 4
    assert all(r["arrival_s"] is not None and r["sent_s"] >= r["arrival_s"] for r in level["records"])
    assert all(2 <= r["tokens_out"] == len(r["token_times"]) <= 6 for r in level["records"])
    (row,) = csv.DictReader((tmp_path / "llm.csv").open())
    assert row["request_count"] == "4" and float(row["time_to_first_token_p50"]) > 0
