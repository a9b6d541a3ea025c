"""bench-llm --rounds: the order of each round, and several rounds' figures merged into one level."""

from __future__ import annotations

import pytest

from tests.unit.test_bench_llm_report import level, report
from tools.bench.llm.__main__ import build_parser
from tools.bench.llm.report import comparisons, render_markdown
from tools.bench.llm.rounds import merge_level, merge_rounds, round_order


def test_every_other_round_measures_the_targets_in_reverse():
    assert [round_order("ABC", index) for index in range(3)] == [list("ABC"), list("CBA"), list("ABC")]


def test_a_merged_level_takes_each_figures_median_and_sums_the_counts():
    rounds = [level("llm iteration", "closed", 16, 0.1, tokens, ttft, completed) for tokens, ttft, completed in
              ((120.0, 900.0, 10), (150.0, 1500.0, 8), (90.0, 1200.0, 10))]  # fmt: skip
    merged = merge_level(rounds)
    assert merged["output_tokens_per_s"] == 120.0 and merged["ttft_p99_ms"] == 1200.0  # medians, each figure its own
    assert merged["requests"] == 30 and merged["completed"] == 28
    assert merged["outcomes"] == {"ok": 28, "cut": 2}
    assert merged["first_error"] == "still streaming 30 s after the level's end"
    assert merged["rounds"] == [120.0, 150.0, 90.0]  # in round order, for the spread
    assert (merged["target"], merged["kind"], merged["load"], merged["label"]) == ("llm iteration", "closed", 16, "16 streams")


def test_two_rounds_give_their_mean_and_missing_figures_stay_missing():
    first, second = level("vllm", "closed", 1, 0.1, 100.0, None, 0), level("vllm", "closed", 1, 0.1, 110.0, 400.0)
    merged = merge_level([first, second])
    assert merged["output_tokens_per_s"] == 105.0
    assert merged["ttft_p99_ms"] == 400.0  # the one round that had a sample
    assert merge_level([first])["output_tokens_per_s"] == 100.0 and "rounds" not in merge_level([first])


def test_rounds_merge_level_by_level_and_refuse_to_mix_levels():
    one = [level("a", "closed", 1, 0.1, 10.0, 1.0), level("a", "closed", 16, 0.1, 100.0, 1.0)]
    two = [level("a", "closed", 16, 0.1, 120.0, 1.0), level("a", "closed", 1, 0.1, 20.0, 1.0)]
    merged = merge_rounds([one, two])
    assert [(m["load"], m["rounds"]) for m in merged] == [(1, [10.0, 20.0]), (16, [100.0, 120.0])]
    with pytest.raises(ValueError, match="different levels"):
        merge_level([one[0], one[1]])


def test_the_report_shows_each_rounds_tokens_and_each_rounds_ratio():
    served = merge_level([level("llm iteration", "closed", 16, 0.1, t, 900.0) for t in (100.0, 140.0)])
    in_process = merge_level([level("engine-loop", "closed", 16, 0.1, t, 900.0) for t in (125.0, 140.0)])
    lines = comparisons([served, in_process])
    assert any("gives 0.91x (by round: 0.80x, 1.00x) the output tokens/s" in line for line in lines), lines
    document = report()
    document["runs"], document["levels"] = 2, [served, in_process]
    markdown = render_markdown(document)
    assert "runs: 2 rounds" in markdown and "out tok/s by round" in markdown and "| 100.0, 140.0 |" in markdown


@pytest.mark.parametrize("text", ["0", "-1", "two"])
def test_rounds_must_be_a_positive_whole_number(text, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--rounds", text])
    assert "expected a whole number above 0" in capsys.readouterr().err
