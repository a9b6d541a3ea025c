"""The LoRA benchmark's plan and report (tools/bench/llm/lora.py); the run itself is
tests/integration/test_bench_llm_lora.py."""

from __future__ import annotations

import numpy as np
import pytest

from tools.bench.llm.lora import Variant, adapter_shares, variants, with_adapters
from tools.bench.llm.lora_report import comparison_table, engines_table
from tools.load.llm.workload import LlmRequest


def test_each_mix_is_served_mixed_and_one_adapter_per_step_and_the_base_once() -> None:
    chosen = variants([1, 4], ["uniform", "zipf"])
    assert [v.name for v in chosen] == [
        "base",
        "mixed, 1 adapters, uniform",
        "mixed, 4 adapters, uniform",
        "one adapter per step, 4 adapters, uniform",
        "mixed, 4 adapters, zipf",
        "one adapter per step, 4 adapters, zipf",
    ]
    assert [v.max_loras for v in chosen] == [1, 1, 4, 1, 4, 1]


def test_zipf_gives_the_first_adapter_the_largest_share_and_both_ways_get_the_same_draw() -> None:
    assert adapter_shares(4, "uniform").tolist() == [0.25] * 4
    shares = adapter_shares(4, "zipf")
    assert shares.sum() == pytest.approx(1.0) and shares[0] == pytest.approx(2 * shares[1]) == pytest.approx(4 * shares[3])
    requests = [LlmRequest(i, f"p{i}", 3, 8) for i in range(2000)]
    names = [f"a{i}" for i in range(4)]
    mixed = with_adapters(requests, Variant("mixed", 4, "zipf"), names, seed=1)
    apart = with_adapters(requests, Variant("one adapter per step", 4, "zipf"), names, seed=1)
    assert [r.lora_name for r in mixed] == [r.lora_name for r in apart]
    counts = np.array([sum(r.lora_name == name for r in mixed) for name in names])
    assert counts[0] > counts[1] > counts[3] and abs(counts[0] / 2000 - shares[0]) < 0.05
    assert all(r.lora_name is None for r in with_adapters(requests, Variant("base", 0, ""), names, seed=1))


def level(way: str, adapters: int, popularity: str, tok: float, **more) -> dict:
    """One level of a report, at 16 streams."""
    return {
        "way": way,
        "load": 16,
        "adapters": adapters,
        "popularity": popularity,
        "output_tokens_per_s": tok,
        "goodput_rps": tok / 100,
        **more,
    }


def test_the_comparison_puts_each_mix_beside_one_per_step_and_the_base() -> None:
    levels = [level("base", 0, "", 100.0), level("mixed", 16, "zipf", 85.0), level("one adapter per step", 16, "zipf", 30.0)]
    (row,) = comparison_table(levels)[2:]
    assert row == "| 16 | 16 | zipf | 85.0 | 30.0 | 100.0 | 0.85x | 2.83x | 0.850, 0.300, 1.000 |"


def test_vllm_is_measured_mixed_and_base_with_lora_on_after_ours() -> None:
    chosen = variants([4], ["uniform"], ["native", "vllm"])
    assert [v.name for v in chosen] == [
        "base",
        "mixed, 4 adapters, uniform",
        "one adapter per step, 4 adapters, uniform",
        "vLLM base",
        "vLLM mixed, 4 adapters, uniform",
    ]
    assert [v.max_loras for v in chosen[3:]] == [1, 4]


def test_the_report_sets_each_engine_apart_and_ours_beside_vllms() -> None:
    levels = [
        level("base", 0, "", 100.0),  # a report from before engines were named: ours
        level("mixed", 4, "uniform", 90.0, engine="native"),
        level("base", 0, "", 50.0, engine="vllm"),
        level("mixed", 4, "uniform", 30.0, engine="vllm"),
    ]
    (ours,) = comparison_table(levels)[2:]
    (theirs,) = comparison_table(levels, "vllm")[2:]
    assert ours.startswith("| 16 | 4 | uniform | 90.0 | - | 100.0 | 0.90x | - |")
    assert theirs.startswith("| 16 | 4 | uniform | 30.0 | - | 50.0 | 0.60x | - |")
    rows = engines_table(levels)[2:]
    assert rows == ["| 16 | base | 100.0 | 50.0 | 2.00x |", "| 16 | mixed, 4 adapters, uniform | 90.0 | 30.0 | 3.00x |"]
