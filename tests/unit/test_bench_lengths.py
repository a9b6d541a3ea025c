"""bench-lengths without a server: arguments, the padding counters' parsing, the report."""

from __future__ import annotations

import pytest

from tools.bench.lengths import parse_args
from tools.bench.lengths_report import comparison_lines, packing_efficiency, render_markdown
from tools.observe.padding_waste import PaddingCounts
from tools.repo.length_policy import run as length_policy_run
from tools.triton_client import parse_metrics

METRICS = """# HELP ort_tokens_real_total Real tokens
# TYPE ort_tokens_real_total counter
ort_tokens_real_total{model="encoder",version="1"} 1200
ort_tokens_real_total{model="other",version="1"} 99
# TYPE ort_tokens_padding_total counter
ort_tokens_padding_total{model="encoder",version="1"} 300
# TYPE ort_rows_total counter
ort_rows_total{model="encoder",version="1"} 40
# TYPE ort_session_runs_total counter
ort_session_runs_total{model="encoder",version="1"} 10
# TYPE ort_ragged_executions_total counter
ort_ragged_executions_total{model="encoder",version="1"} 3
# TYPE nv_inference_count counter
nv_inference_count{model="encoder",version="1"} 40
"""


def test_padding_counts_are_read_per_model_and_subtracted() -> None:
    counts = PaddingCounts.from_samples(parse_metrics(METRICS), "encoder")
    assert counts == PaddingCounts(1200, 300, 40, 10, 3)
    delta = counts - PaddingCounts(200, 50, 10, 5, 1)
    assert delta.waste == pytest.approx(250 / 1000)
    assert delta.rows_per_run == pytest.approx(6.0)


def test_no_real_tokens_means_no_waste_figure() -> None:
    assert PaddingCounts().waste is None
    assert PaddingCounts().rows_per_run is None


@pytest.mark.parametrize(
    "argv",
    [["--policies", "batch,fixed"], ["--concurrency", "0"], ["--rate", "-1"], ["--passage-share", "2"], ["--priority-mix", "1:0.5"]],
)
def test_bad_arguments_are_refused_before_anything_starts(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2


def test_length_policy_cli_refuses_buckets_for_another_policy_and_lists_gpu_paths(capsys) -> None:
    with pytest.raises(SystemExit):
        length_policy_run(["--policy", "ragged", "--buckets", "16,64"])
    assert length_policy_run(["--list"]) == 0
    assert "flattened" in capsys.readouterr().out


def _row(policy: str, traffic: str, useful: float | None, short_p99: float | None) -> dict:
    latency = {"count": 0 if short_p99 is None else 10, "p50_ms": 10.0, "p99_ms": short_p99 or 0.0}
    return {
        "policy": policy,
        "traffic": traffic,
        "throughput_rps": 10.0,
        "useful_tokens_per_s": useful,
        "outcomes": {"ok": 10},
        "per_length_class": {"short": {"latency": latency}},
        "per_priority": {},
        "server": {"encoder": {"average_batch_size": 2.0}},
        "padding": {"waste": None if useful is None else 0.5, "rows_per_run": None},
    }


def test_the_report_compares_each_policy_with_the_first_and_shows_missing_values_as_dashes() -> None:
    rows = [
        _row("batch", "concurrency 16", 1000.0, 900.0),
        _row("ragged", "concurrency 16", 2500.0, 300.0),
        _row("ragged", "poisson 5 req/s", None, None),
    ]
    assert comparison_lines(rows) == [
        "- ragged vs batch at concurrency 16: useful tokens/s x2.50; p50/p99 short 10 / 300 vs 10 / 900 ms, long - vs - ms"
    ]
    assert packing_efficiency(rows[1], 5000.0) == pytest.approx(0.5)
    assert packing_efficiency(rows[2], 5000.0) is None
    report = {
        "cpu": {"model": "Test CPU", "cpus": 2, "vector_flags": ["avx2"], "load_average": [0.5, 0.5, 0.5]},
        "settings": {
            "workload": "w",
            "mean_tokens": 66.0,
            "concurrency": [16],
            "poisson_rate": 5.0,
            "warmup_s": 1,
            "window_s": 2,
            "max_windows": 3,
            "encoder": {"max_batch_size": 32, "instances": 2},
            "priority_mix": {},
        },
        "raw_engine": {
            "points": [{"layout": "1 session", "batch_size": 32, "length": 16, "tokens_per_s": 5000.0}],
            "best_tokens_per_s": 5000.0,
        },
        "rows": rows,
        "seconds": 12.0,
    }
    markdown = render_markdown(report)
    assert "CPU: Test CPU, 2 logical CPUs; vector extensions: avx2" in markdown
    assert "| ragged | poisson 5 req/s | 10.0 | - | - | - | - | 2.00 | - | - | 0 |" in markdown
    assert "busy" not in markdown  # load 0.5 on 2 CPUs
