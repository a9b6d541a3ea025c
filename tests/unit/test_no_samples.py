"""A class or window with no successful request has no latency: None (JSON null), shown as
"-", and never compared, scored or preferred as if it were 0 ms."""

from __future__ import annotations

import csv
import json
from dataclasses import asdict

import numpy as np
import pytest

from tools.adapt.replay import TracePhase, slo_window_figures
from tools.adapt.report import best_static, phase_summary, render_markdown, verdict
from tools.bench.render import render_markdown as render_bench
from tools.load.driver import Record
from tools.load.results import ClassResult, LatencySummary, Results
from tools.loadgen.report import LoadResult, ServerWindow
from tools.reliability.overload import LevelRow, OverloadResult, markdown_table
from tools.reliability.soak import SoakReport, Window
from tools.repo.candidate import Candidate
from tools.triton_client.stats import ModelStats
from tools.tune.objectives import score
from tools.tune.report import write_trials
from tools.tune.session import Trial

FIGURES = ("mean_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "max_ms")


def load_result(outcomes: dict[str, int], latency: LatencySummary, per_priority: dict[int, ClassResult] | None = None) -> LoadResult:
    sent = sum(outcomes.values())
    ok = outcomes.get("ok", 0)
    return LoadResult(
        "poisson 40 req/s",
        "embed",
        "grpc",
        10.0,
        3,
        True,
        sent,
        outcomes,
        ok / 10,
        ok / 10,
        latency,
        per_priority or {},
        0,
        1.0,
        open_loop=True,
    )


def test_an_empty_latency_summary_is_none_everywhere_and_null_in_json() -> None:
    summary = LatencySummary.of(np.array([]))
    assert summary.count == 0
    assert all(getattr(summary, name) is None for name in FIGURES)
    assert json.loads(json.dumps(asdict(summary))) == {"count": 0} | dict.fromkeys(FIGURES)


def record(sent: float, latency: float, outcome: str, priority: int = 0, label: str = "", tokens: int | None = None) -> Record:
    return Record(0, "default", priority, "embed", 0, sent, latency, outcome, 1, tokens, label)


def test_a_class_whose_requests_were_all_rejected_has_no_latency() -> None:
    latencies = [0.010, 0.020, 0.001, 0.001, 0.001]
    outcomes = ["ok", "ok", "rejected", "rejected", "rejected"]
    classes = Results.of([record(0, s, o, p) for s, o, p in zip(latencies, outcomes, [1, 1, 2, 2, 2])], 1.0).per_priority
    assert classes[1].latency.p50_ms == pytest.approx(15.0)
    assert classes[2].latency.count == 0 and classes[2].latency.p50_ms is None
    assert classes[2].outcomes == {"rejected": 3} and classes[2].throughput_rps == 0.0


def test_a_length_class_whose_requests_all_failed_has_no_latency_and_no_useful_tokens() -> None:
    labels = ["short", "long", "short", "long"]
    outcomes = ["ok", "timeout", "ok", "timeout"]
    latencies, tokens = [0.01, 2.0, 0.03, 2.0], [10, 200, 20, 180]
    results = Results.of([record(0, *entry) for entry in zip(latencies, outcomes, [0] * 4, labels, tokens)], 2.0)
    per_class = results.per_label
    assert per_class["short"].latency.p50_ms == pytest.approx(20.0)
    assert per_class["long"].latency.count == 0 and all(getattr(per_class["long"].latency, name) is None for name in FIGURES)
    assert per_class["long"].outcomes == {"timeout": 2}
    assert results.useful_tokens_per_s == pytest.approx(15.0), "only the answered requests' tokens count"
    nothing = Results.of([], 2.0)
    assert (nothing.per_label, nothing.useful_tokens_per_s) == ({}, None), "nothing sent: no rate"


def test_the_terminal_table_shows_a_dash_for_a_class_without_latency() -> None:
    served = ClassResult(2, {"ok": 2}, LatencySummary.of(np.array([0.010, 0.020])), 0.2)
    shed = ClassResult(3, {"rejected": 3}, LatencySummary(), 0.0)
    result = load_result({"ok": 2, "rejected": 3}, served.latency, {1: served, 2: shed})
    table = result.table()
    row = next(line for line in table.splitlines() if line.strip().startswith("priority 2"))
    assert row.split()[2:] == ["3", "0", "3", "0", "0", "-", "-", "-", "-", "-"]
    assert "sends late by > 10 ms: 0" in table
    nothing = load_result({"rejected": 3}, LatencySummary())
    assert "p50       - ms" in nothing.one_line()


def test_a_model_that_executed_nothing_has_no_server_averages() -> None:
    idle = ServerWindow.of(ModelStats(failures=3))
    assert idle.average_batch_size is None and idle.average_queue_ms is None and idle.average_compute_ms is None
    busy = ServerWindow.of(ModelStats(requests=4, inferences=4, executions=2, queue_ns=8_000_000, compute_ns=40_000_000))
    assert (busy.average_batch_size, busy.average_queue_ms, busy.average_compute_ms) == (2.0, 2.0, 10.0)
    result = load_result({"rejected": 3}, LatencySummary())
    result.server = {"encoder": idle}
    row = next(line for line in result.table().splitlines() if line.strip().startswith("encoder"))
    assert row.split() == ["encoder", "0", "0", "-", "-", "-", "0", "3", "-"]
    assert "encoder: batch -" in result.one_line()


def test_a_level_without_successful_requests_is_never_feasible_nor_a_0_ms_p99() -> None:
    empty = load_result({"rejected": 0}, LatencySummary())  # nothing answered in the window, no error counted either
    good = load_result({"ok": 100}, LatencySummary(count=100, p99_ms=80.0))
    assert not score([empty], p99_ms=50).feasible
    assert score([empty], p99_ms=50).p99_ms is None
    assert not score([empty], 50, "throughput-first").feasible
    mixed = score([empty, good], p99_ms=100)
    assert mixed.feasible and mixed.p99_ms == 80.0
    assert score([], p99_ms=50).p99_ms is None


def test_mixed_objective_needs_a_priority_one_latency() -> None:
    shed = ClassResult(10, {"rejected": 10}, LatencySummary(), 0.0)
    result = load_result({"ok": 90}, LatencySummary(count=90, p99_ms=20.0), {1: shed})
    assert not score([result], 50, "mixed").feasible


def test_tuner_csv_leaves_a_missing_latency_empty(tmp_path) -> None:
    empty = load_result({"rejected": 5}, LatencySummary())
    trial = Trial(Candidate(8, (), 0), score([empty], 50), [empty.to_dict()])
    write_trials([trial], tmp_path, "encoder")
    row = next(csv.DictReader((tmp_path / "trials.csv").open()))
    assert row["p50_ms"] == row["p99_ms"] == row["score_p99_ms"] == ""


def records(entries: list[tuple[float, float, str]]) -> list[Record]:
    return [record(sent, latency, outcome) for sent, latency, outcome in entries]


def test_a_replay_window_with_nothing_sent_or_answered_has_no_figures() -> None:
    idle = slo_window_figures(records([]), 0.0, 5.0, slo_ms=100)
    assert idle.sent == 0 and idle.attainment is None and idle.mean_ms is None and idle.p99_ms is None
    failed = slo_window_figures(records([(1.0, 0.002, "rejected")]), 0.0, 5.0, slo_ms=100)
    assert failed.attainment == 0.0 and failed.mean_ms is None and failed.p99_ms is None


PHASES = [TracePhase("low", 10, 5.0), TracePhase("peak", 40, 5.0)]


def run_of(label: str, entries: list[tuple[float, float, str]]) -> dict:
    log = records(entries)
    return {
        "label": label,
        "phases": phase_summary(log, PHASES, slo_ms=100),
        "windows": [asdict(slo_window_figures(log, a, a + 5.0, 100)) for a in (0.0, 5.0)],
    }


def test_best_static_never_prefers_a_config_that_served_nothing() -> None:
    runs = {
        "static 0 us": run_of("static", [(6.0, 0.300, "ok"), (7.0, 0.400, "ok")]),  # slow, but answered
        "static 10000 us": run_of("static", [(6.0, 0.001, "rejected"), (7.0, 0.001, "rejected")]),  # answered nothing
        "controller": run_of("adaptive", [(6.0, 0.200, "ok")]),
    }
    assert runs["static 10000 us"]["phases"]["peak"]["mean_ms"] is None
    assert best_static(runs, "peak") == "static 0 us"
    assert best_static(runs, "low") is None, "nobody sent anything in the low phase"
    assert "no static config answered" in verdict(runs, "low")


def test_the_adaptive_report_renders_missing_figures_as_dashes() -> None:
    runs = {
        "static 0 us": run_of("static", [(6.0, 0.300, "ok")]),
        "controller": run_of("adaptive", [(6.0, 0.001, "rejected")]),
        "static 0 us (repeat)": run_of("repeat", [(6.0, 0.001, "rejected")]),
    }
    results = {
        "settings": {"p99_ms": 100, "seq_len": 128, "phases": [asdict(p) for p in PHASES], "arrivals": 3},
        "curve": [{"batch_size": 1, "rows_per_s": 60.0}],
        "runs": runs,
        "reload_cost": {
            "reload_seconds": [1.0],
            "failed_total": 0,
            "outside_reload": {"requests": 0, "failed": 0},
            "during_reload": {"requests": 2, "failed": 0, "mean_ms": 5.0, "p50_ms": 5.0, "p99_ms": 6.0, "max_ms": 6.0},
        },
        "controller": {"decisions": [], "reloads": []},
    }
    markdown = render_markdown(results)
    assert "the controller does NOT match it" in markdown
    assert "| - (- ms) |" in markdown  # a window with nothing sent
    assert "| outside reload | 0 | 0 | - | - | - | - |" in markdown
    assert "None" not in markdown and "nan" not in markdown


def test_the_benchmark_report_shows_a_level_without_latency_as_dashes() -> None:
    shed = load_result({"rejected": 4}, LatencySummary()).to_dict() | {"traffic": "concurrency 16", "server": {}}
    served = load_result({"ok": 4}, LatencySummary(count=4, p50_ms=10.0, p99_ms=20.0)).to_dict() | {"traffic": "concurrency 16"}
    report = {
        "settings": {"sequence_length": 128, "concurrency": [16], "poisson_rate": 40, "window_s": 2, "max_windows": 4},
        "raw_engine": [{"batch_size": 1, "rows_per_s": 60.0, "execution_ms": 16.0}],
        "pairs": {"mixed": {"preset": "mixed preset (committed)", "twin": "mixed: no dynamic batching"}},
        "served": {"mixed: no dynamic batching": [served], "mixed preset (committed)": [shed]},
        "naive_batcher": [],
        "seconds": 10,
    }
    markdown = render_bench(report)
    assert "| mixed preset (committed) | concurrency 16 | 0.0 | - | - |" in markdown
    assert "mixed preset (committed): errors at every load level" in markdown
    assert "| mixed | concurrency 16 | 0.0 | 0.4 | x0.00 | - | 20.0 | x- | loses |" in markdown
    assert "**mixed: loses to no batching at concurrency 16**" in markdown and "None" not in markdown


def test_soak_and_overload_reports_show_missing_latency_as_dashes() -> None:
    window = Window(30.0, None, None, 0, {"tritonserver": 40.0})
    assert "p50 - ms, p99 - ms" in window.progress(10, 10)
    report = SoakReport(
        5,
        30.0,
        10,
        10,
        {"good": {"ok": 0, "error": 10}},
        {"good": 10},
        ["good: Exceeds maximum queue size"],
        {"tritonserver": 40.0},
        {"tritonserver": 41.0},
        {"p50_ms": None, "p99_ms": None},
        {"p50_ms": None, "p99_ms": None},
        {"embed": {"success": 0, "failures": 10, "cache_hits": 0}},
        [window],
    )
    summary = report.summary()
    assert "p50 - -> - ms" in summary and "FAILED" in summary and "None" not in summary
    row = LevelRow(2, 10, 0, 10, 0, 0, None, None, None)
    table = markdown_table([OverloadResult(100.0, 5.0, 10, {"rejected": 10}, [row], 0, 20, True)])
    assert "| 1 | 100 | 2 | 10 | 0 | 10 | 0 | 0 | - | - | - |" in table
