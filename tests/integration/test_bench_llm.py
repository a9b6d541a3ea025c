"""bench-llm's harness against the real server: tiny prompts and outputs, two modes, one
short level each. It checks what the harness measures, not how fast the machine is."""

from __future__ import annotations

import json
import shutil

import pytest

from tools.bench.llm.__main__ import DEFAULT_LLAMA_SERVER, run
from tools.bench.llm.targets import MODEL
from tools.load.llm.workload import gguf_path
from tools.repo.model_config import ModelConfig

pytestmark = pytest.mark.integration


def test_the_harness_streams_every_token_of_every_request_in_two_modes_and_restores_the_config(llm_triton, tmp_path) -> None:
    server = llm_triton
    control = server.client
    before: ModelConfig = control.config(MODEL)
    args = [
        *("--url", server.options.http_url, "--grpc-url", server.options.grpc_url),
        *(("--admin-key", server.admin_key) if server.admin_key else ()),
        # no warm-up: each stream's first request is scored, however slow a busy machine makes it
        *("--targets", "iteration,none", "--concurrency", "2", "--rates", "", "--seconds", "1", "--warmup", "0", "--drain", "120"),
        *("--prompt-lengths", "8-24", "--output-lengths", "2-6", "--requests", "8", "--out", str(tmp_path / "report"), "-q"),
    ]
    assert run(args) == 0
    report = json.loads((tmp_path / "report" / "bench-llm.json").read_text())
    assert [t["name"] for t in report["targets"]] == ["llm iteration", "llm none"]
    for level in report["levels"]:
        assert level["requests"] >= 2 and level["completed"] == level["requests"], level
        assert 2 <= level["mean_tokens_out"] <= 6  # exactly the drawn counts came back: EOS was ignored
        assert level["mean_tokens_in"] is not None and level["ttft_p50_ms"] is not None
    assert (tmp_path / "report" / "bench-llm.png").stat().st_size > 0
    assert control.config(MODEL) == before  # the server's own config is back


@pytest.mark.skipif(not DEFAULT_LLAMA_SERVER.is_file() or shutil.which("make") is None, reason="make llama-server has not run")
def test_the_harness_streams_from_llama_server_on_the_same_gguf(tmp_path) -> None:
    gguf_path()  # the weights are installed
    args = [
        *("--targets", "llama-server", "--concurrency", "2", "--rates", "", "--seconds", "1", "--warmup", "0", "--drain", "60"),
        *("--prompt-lengths", "8-24", "--output-lengths", "2-6", "--requests", "8", "--llama-parallel", "2", "--llama-context", "2048"),
        *("--out", str(tmp_path / "report"), "-q"),
    ]
    assert run(args) == 0
    (level,) = json.loads((tmp_path / "report" / "bench-llm.json").read_text())["levels"]
    assert level["completed"] == level["requests"] >= 2 and 2 <= level["mean_tokens_out"] <= 6


def test_the_harness_drives_our_engine_in_process_with_the_committed_knobs(tmp_path) -> None:
    """engine-loop: no server; the same workload through the EngineLoop the model runs."""
    args = [
        *("--targets", "engine-loop", "--concurrency", "2", "--rates", "", "--seconds", "1", "--warmup", "0", "--drain", "120"),
        *("--set", "max_num_seqs=3"),
        *("--prompt-lengths", "8-24", "--output-lengths", "2-6", "--requests", "8", "--out", str(tmp_path / "report"), "-q"),
    ]
    assert run(args) == 0
    report = json.loads((tmp_path / "report" / "bench-llm.json").read_text())
    (target,) = report["targets"]
    assert target["name"] == "engine-loop" and "config.pbtxt" in target["description"] and "mode='iteration'" in target["description"]
    assert "max_num_seqs=3" in target["description"]  # --set reaches our engine
    (level,) = report["levels"]
    assert level["completed"] == level["requests"] >= 2 and 2 <= level["mean_tokens_out"] <= 6
    assert level["mean_tokens_in"] is not None and level["ttft_p50_ms"] is not None and level["tpot_p50_ms"] is not None


def test_rounds_measure_the_served_engine_beside_its_in_process_twin_and_merge_per_level(llm_triton, tmp_path) -> None:
    """--rounds 2: every target twice, each served set followed by its in-process twin, one row per
    level holding both rounds' figures, and the server's config restored afterwards."""
    server = llm_triton
    before: ModelConfig = server.client.config(MODEL)
    args = [
        *("--url", server.options.http_url, "--grpc-url", server.options.grpc_url),
        *(("--admin-key", server.admin_key) if server.admin_key else ()),
        *("--targets", "iteration,engine-loop", "--concurrency", "2", "--rates", "", "--seconds", "1", "--warmup", "0"),
        *("--drain", "120", "--rounds", "2", "--set", "max_num_seqs=3"),
        *("--prompt-lengths", "8-24", "--output-lengths", "2-6", "--requests", "8", "--out", str(tmp_path / "report"), "-q"),
    ]
    assert run(args) == 0
    report = json.loads((tmp_path / "report" / "bench-llm.json").read_text())
    assert report["runs"] == 2
    assert [t["name"] for t in report["targets"]] == ["llm iteration", "engine-loop"]
    assert [level["target"] for level in report["levels"]] == ["llm iteration", "engine-loop"]  # one row per level
    for level in report["levels"]:
        assert len(level["rounds"]) == 2 and all(tokens > 0 for tokens in level["rounds"]), level
        assert level["completed"] == level["requests"] >= 4, level  # both rounds' requests, every one answered
    markdown = (tmp_path / "report" / "bench-llm.md").read_text()
    assert "runs: 2 rounds" in markdown and "(by round: " in markdown
    assert server.client.config(MODEL) == before
