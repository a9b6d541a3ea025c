"""`make bench-lora` end to end on the real Triton, in miniature: the three ways of serving
two random adapters on our engine and two on vLLM's, each measured, and the report with the
comparisons it exists for."""

from __future__ import annotations

import json

import pytest

from tools.bench.llm.lora import run

pytestmark = pytest.mark.integration


def test_a_small_run_measures_every_way_and_writes_the_comparison(tmp_path) -> None:
    argv = ["--adapters", "2", "--popularity", "uniform", "--concurrency", "2", "--seconds", "3", "--warmup", "0"]
    argv += [
        "--engines",
        "native,vllm",
        "--prompt-lengths",
        "8-16",
        "--output-lengths",
        "4-8",
        "--requests",
        "40",
        "--out",
        str(tmp_path),
        "-q",
    ]
    assert run(argv) == 0
    report = json.loads((tmp_path / "bench-lora.json").read_text())
    ways = {level["target"]: level for level in report["levels"]}
    ours = {"base", "mixed, 2 adapters, uniform", "one adapter per step, 2 adapters, uniform"}
    assert set(ways) == ours | {"vLLM base", "vLLM mixed, 2 adapters, uniform"}
    for name, level in ways.items():
        assert level["completed"] > 0 and level["completed"] == level["requests"], (name, level["first_error"])
    assert [v["max_loras"] for v in report["variants"]] == [1, 2, 1, 1, 2]
    table = (tmp_path / "bench-lora.md").read_text()
    assert "| 2 | 2 | uniform |" in table and report["cpu"]["model"] in table
    assert "## Our engine against vLLM's" in table and "| 2 | mixed, 2 adapters, uniform |" in table
