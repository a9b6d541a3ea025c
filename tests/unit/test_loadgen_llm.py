"""`tools.loadgen --model llm`: options to settings, and the CSV in GenAI-Perf's names (no server)."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from tools.load.llm.figures import LoadFigures, Slo
from tools.load.llm.records import StreamRecord
from tools.load.llm.workload import PromptSetWorkload, SharedPrefixWorkload, Workload
from tools.load.schedules import ClosedLoop, Gamma, Poisson, Trace
from tools.loadgen.__main__ import build_parser, check_arguments
from tools.loadgen.cli_args import traffics_from_args
from tools.loadgen.llm.args import LlmLoadSettings
from tools.loadgen.llm.report import LlmLevelResult, csv_columns, write_llm_csv


def settings(*argv: str):
    args = build_parser().parse_args(["--model", "llm", *argv])
    check_arguments(args)
    return LlmLoadSettings.from_cli_args(args, traffics_from_args(args))


def test_closed_loop_levels_run_for_the_duration_or_stop_at_the_number_of_prompts() -> None:
    by_time = settings("--concurrency", "1,4", "--duration", "15")
    assert [(p.schedule, p.seconds) for p in by_time.levels] == [(ClosedLoop(1), 15.0), (ClosedLoop(4), 15.0)]
    by_count = settings("--concurrency", "2", "--num-prompts", "10")
    assert by_count.levels[0].schedule == ClosedLoop(2, requests=10)


def test_burstiness_turns_the_rate_into_gamma_arrivals_and_a_number_of_prompts_keeps_the_first_ones() -> None:
    (level,) = settings("--rate", "2", "--burstiness", "0.5", "--duration", "30").levels
    assert level.schedule == Gamma(2.0, 0.5) and level.seconds == 30.0
    (counted,) = settings("--rate", "2", "--num-prompts", "7", "--seed", "4").levels
    expected = Poisson(2.0).offsets(3600.0, np.random.default_rng(4))[:7]
    assert isinstance(counted.schedule, Trace) and counted.schedule.arrivals == pytest.approx(tuple(expected))
    assert counted.seconds > expected[-1]


def test_the_api_follows_the_protocol_unless_named_and_the_slo_reads_vllms_goodput() -> None:
    assert settings().api == "grpc" and settings("--protocol", "http").api == "generate-stream"
    chosen = settings("--llm-api", "openai", "--openai-url", "127.0.0.1:9000", "--goodput", "ttft:500", "e2el:4000")
    assert chosen.api == "openai" and chosen.openai_model == "llm"
    assert chosen.slo == Slo(ttft_s=0.5, tpot_s=None, e2e_s=4.0)


def test_each_workload_option_builds_its_workload() -> None:
    assert isinstance(settings("--prompt-tokens", "8-64").workload, Workload)
    assert isinstance(settings("--workload", "prompts").workload, PromptSetWorkload)
    shared = settings("--workload", "shared-prefix", "--prefix-tokens", "300").workload
    assert isinstance(shared, SharedPrefixWorkload) and shared.prefix_tokens == 300


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--burstiness", "0.5"), "--burstiness"),
        (("--rate", "1", "--burstiness", "0.5", "--burst-rate", "4"), "not both"),
        (("--llm-api", "openai"), "--openai-url"),
        (("--goodput", "ttft=1"), "--goodput"),
        (("--num-prompts", "0"), "--num-prompts"),
        (("--output-tokens", "9-3"), "--output-tokens"),
    ],
)
def test_contradicting_or_impossible_options_are_refused_by_name(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings(*argv)


def test_the_csv_has_one_row_per_level_in_genai_perfs_metric_names_with_empty_cells_for_no_samples(tmp_path) -> None:
    done = StreamRecord(0, 0.0, tokens_in=5)
    for t in (0.25, 0.35, 0.45):
        done.add_tokens(t, 1)
    done.end_s = 0.45
    failed = StreamRecord(1, 0.0, outcome="error")
    results = [
        LlmLevelResult("concurrency 1", LoadFigures.of([done], 1.0, Slo()), [done]),
        LlmLevelResult("concurrency 2", LoadFigures.of([failed], 1.0, Slo()), [failed]),
    ]
    rows = list(csv.DictReader(write_llm_csv(results, tmp_path / "llm.csv").open()))
    assert list(rows[0]) == csv_columns()
    for name in ("time_to_first_token", "inter_token_latency", "request_latency", "output_sequence_length", "input_sequence_length"):
        assert {f"{name}_{stat}" for stat in ("avg", "p50", "p90", "p99")} <= set(rows[0])
    assert float(rows[0]["time_to_first_token_avg"]) == pytest.approx(250.0)
    assert float(rows[0]["inter_token_latency_p50"]) == pytest.approx(100.0)
    assert float(rows[0]["request_latency_max"]) == pytest.approx(450.0)
    assert float(rows[0]["output_token_throughput"]) == pytest.approx(3.0)
    assert float(rows[0]["request_goodput"]) == pytest.approx(1.0) and rows[0]["input_sequence_length_avg"] == "5"
    assert rows[1]["time_to_first_token_avg"] == "" and rows[1]["request_count"] == "1" and rows[1]["completed"] == "0"
