"""`python -m tools.loadgen --model llm --llm-api openai` against the real gateway in front of the
real `llm` model: every request streams exactly its tokens through /v1/completions, and the
tokens counted from the stream agree with the gateway's `usage`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import start_gateway
from tools.paths import REPO_ROOT

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def gateway(llm_triton, tmp_path_factory: pytest.TempPathFactory):
    process = start_gateway(llm_triton.options.grpc_url, tmp_path_factory.mktemp("loadgen-openai") / "gateway.log")
    try:
        yield process
    finally:
        process.stop()


def test_loadgen_streams_the_llm_through_the_gateways_openai_api(llm_triton, gateway, tmp_path) -> None:
    command = [
        *(sys.executable, "-m", "tools.loadgen", "--model", "llm", "--llm-api", "openai"),
        *("--openai-url", gateway.url.removeprefix("http://"), "--url", llm_triton.options.http_url),
        *("--rate", "4", "--num-prompts", "4", "--prompt-tokens", "8-24", "--output-tokens", "2-6"),
        *("--json", str(tmp_path / "llm.json"), "-q"),
    ]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (level,) = json.loads((tmp_path / "llm.json").read_text())["levels"]
    assert level["figures"]["requests"] == level["figures"]["completed"] == 4
    for record in level["records"]:
        assert record["outcome"] == "ok" and record["finish_reason"] == "length", record
        assert 2 <= record["tokens_out"] == len(record["token_times"]) <= 6
        assert record["tokens_in"] is not None and record["tokens_in"] >= 1
