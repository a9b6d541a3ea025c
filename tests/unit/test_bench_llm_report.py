"""bench-llm's report (Markdown, JSON, PNG) from a synthetic run, and its command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.bench.llm.__main__ import FULL, QUICK, append_to, build_parser, plan_of, selected_targets
from tools.bench.llm.report import comparisons, render_markdown, write_report
from tools.bench.llm.targets import LlamaServerTarget
from tools.load.schedules import ClosedLoop, Poisson


def level(target: str, kind: str, load: float, goodput: float, tokens: float, ttft_p99: float | None, completed: int = 10) -> dict:
    return {
        "target": target,
        "kind": kind,
        "load": load,
        "label": f"{load:g} streams" if kind == "closed" else f"Poisson {load:g} req/s",
        "requests": 10,
        "completed": completed,
        "outcomes": {"ok": completed, **({"cut": 10 - completed} if completed < 10 else {})},
        "duration_s": 50.0,
        "output_tokens_per_s": tokens,
        "requests_per_s": completed / 50,
        "goodput_rps": goodput,
        "good_share": goodput * 50 / 10,
        "ttft_p50_ms": None if ttft_p99 is None else ttft_p99 / 2,
        "ttft_p99_ms": ttft_p99,
        "tpot_p50_ms": 40.0,
        "tpot_p99_ms": 80.0,
        "itl_p99_ms": 120.0,
        "e2e_p50_ms": 3000.0,
        "mean_tokens_in": 250.0,
        "mean_tokens_out": 80.0,
        "late_sends": 0,
        "first_error": None if completed == 10 else "still streaming 30 s after the level's end",
    }


def report() -> dict:
    levels = [
        level("llm iteration", "closed", 16, 0.12, 120.0, 900.0),
        level("llm request", "closed", 16, 0.03, 70.0, 4000.0),
        level("llm none", "closed", 16, 0.01, 30.0, 20000.0, completed=6),
        level("llama-server", "closed", 16, 0.10, 150.0, 1200.0),
        level("llm iteration", "closed", 1, 0.05, 40.0, 300.0),
        level("llama-server", "closed", 1, 0.06, 80.0, 200.0),
        level("llm iteration", "poisson", 0.5, 0.08, 60.0, None, completed=0),
    ]
    return {
        "date": "2026-12-03T19:00:00",
        "cpu": {"model": "AMD EPYC", "cores": 2, "flags": ["avx2"]},
        "load_average": 3.1,
        "runs": 1,
        "workload": {
            "description": "1000 requests (seed 0)",
            "prompt_lengths": "32-1024",
            "output_lengths": "16-256",
            "seed": 0,
            "mean_prompt_tokens": 250.0,
            "mean_output_tokens": 80.0,
        },
        "slo": "TTFT <= 1000 ms and TPOT <= 100 ms, per request",
        "slo_ttft_s": 1.0,
        "slo_tpot_s": 0.1,
        "settings": {"concurrency": [1, 16], "rates": [0.5], "seconds": 45.0, "drain_s": 30.0, "quick": False},
        "targets": [{"name": "llm iteration", "description": "Triton llm, mode=iteration", "protocol": "gRPC"}],
        "levels": levels,
    }


def test_the_comparisons_state_the_issues_targets_as_measured_ratios() -> None:
    lines = comparisons(report()["levels"])
    assert "- 16 streams: iteration's goodput is 4.00x request's and 12.00x none's; request's TTFT p99 is 4.44x iteration's" in lines[0]
    assert lines[1] == "- 16 streams: iteration's output tokens/s are 0.80x llama-server's (target: >= 1x)"
    assert lines[2] == "- 1 stream: iteration's output tokens/s are 0.50x llama-server's, its TPOT p50 1.00x theirs (target: <= 1x)"
    assert len(lines) == 3  # no 32-stream level ran: nothing is claimed about it


def test_the_comparisons_state_what_the_triton_path_costs_vllm_and_our_engine_against_it() -> None:
    levels = [level("vllm", "closed", 16, 0.2, 330.0, 900.0), level("vllm-server", "closed", 16, 0.2, 360.0, 800.0)]
    levels.append(level("llm iteration", "closed", 16, 0.1, 165.0, 1500.0))
    lines = comparisons(levels)
    assert lines[0] == (
        "- 16 streams: vLLM inside Triton's output tokens/s are 0.92x vLLM's own server's, its TTFT p99 1.12x "
        "(what the Triton path costs; target at 16 streams: >= 0.9x)"
    )
    assert (
        lines[1]
        == "- 16 streams: our engine's (iteration) output tokens/s are 0.50x vLLM's inside Triton (target at 16 and 32 streams: >= 1.2x)"
    )
    assert (
        lines[2]
        == "- 16 streams: our engine's (iteration) output tokens/s are 0.46x vLLM's own server's (target at 16 and 32 streams: >= 1.2x)"
    )


def test_the_comparisons_state_what_the_triton_path_costs_our_engine() -> None:
    levels = [level("engine-loop", "closed", 1, 0.2, 40.0, 900.0), level("llm iteration", "closed", 1, 0.2, 38.0, 950.0)]
    levels.append(level("llm iteration", "closed", 16, 0.1, 165.0, 1500.0))  # no in-process level at 16: no claim
    assert comparisons(levels) == [
        "- 1 streams: our engine served through Triton (iteration) gives 0.95x the output tokens/s of the same engine in process "
        "(engine-loop; what the Triton path costs it; target at 1 and 16 streams: >= 0.9x)"
    ]


def test_vllms_own_server_runs_the_knobs_of_the_vllm_config_on_the_same_checkpoint(tmp_path: Path) -> None:
    from llm.serving.knobs import parameters_from_pbtxt
    from llm.vllm_engine.knobs import VllmKnobs
    from tools.bench.llm.targets import VLLM_CONFIG, VllmServerTarget

    command = VllmServerTarget(tmp_path / "hf").command(9123)
    assert command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    knobs = VllmKnobs.from_parameters(parameters_from_pbtxt(VLLM_CONFIG))
    assert command[3 : 3 + len(knobs.server_flags(tmp_path / "hf"))] == knobs.server_flags(tmp_path / "hf")
    assert command[-6:] == ["--host", "127.0.0.1", "--port", "9123", "--served-model-name", "llm"]


def test_the_markdown_names_the_cpu_the_slo_the_runs_and_every_level() -> None:
    text = render_markdown(report())
    assert "AMD EPYC, 2 cores, avx2" in text and "runs: 1" in text and "TTFT <= 1000 ms" in text
    assert text.count("| 16 streams |") == 4 and "| Poisson 0.5 req/s | llm iteration |" in text
    assert "| - |" in text  # a level without a TTFT sample shows a dash, not 0
    assert "- 16 streams, llm none: {'ok': 6, 'cut': 4} (still streaming" in text


def test_the_report_is_written_as_json_markdown_and_a_png(tmp_path: Path) -> None:
    paths = write_report(report(), tmp_path / "bench-llm")
    assert [p.name for p in paths] == ["bench-llm.json", "bench-llm.md", "bench-llm.png"]
    assert json.loads(paths[0].read_text())["levels"][0]["target"] == "llm iteration"
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_where_no_request_was_answered_still_gets_its_plot(tmp_path: Path) -> None:
    empty = report()
    for one in empty["levels"]:
        one["ttft_p99_ms"] = None  # no TTFT sample anywhere: a log axis would have nothing to scale
    paths = write_report(empty, tmp_path / "bench-llm")
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_quick_is_a_shorter_plan_and_explicit_levels_override_it() -> None:
    assert plan_of(build_parser().parse_args([])) == FULL
    quick = plan_of(build_parser().parse_args(["--quick"]))
    assert quick == QUICK and quick.seconds < FULL.seconds
    custom = plan_of(build_parser().parse_args(["--quick", "--concurrency", "2,8", "--rates", "", "--seconds", "5"]))
    assert custom.schedules() == [ClosedLoop(2), ClosedLoop(8)] and custom.seconds == 5
    assert FULL.schedules()[-1] == Poisson(1.0)


def test_a_full_run_of_four_targets_is_planned_to_end_well_within_an_hour() -> None:
    worst_per_target = len(FULL.schedules()) * (FULL.seconds + FULL.drain_s)
    assert 4 * worst_per_target < 45 * 60


@pytest.mark.parametrize("text", ["iteration,nope", ""])
def test_an_unknown_target_is_refused_with_the_choices(text: str) -> None:
    with pytest.raises(ValueError, match="choose from iteration, request, none, engine-loop, vllm, vllm-server, llama-server"):
        selected_targets(text)


def test_llama_server_serves_the_gguf_with_its_slots_threads_and_a_unified_cache(tmp_path: Path) -> None:
    target = LlamaServerTarget(tmp_path / "llama-server", tmp_path / "m.gguf", parallel=16, context=32768, threads=2)
    command = target.command(8080)
    assert command[:3] == [str(tmp_path / "llama-server"), "-m", str(tmp_path / "m.gguf")]
    for flag, value in (("--parallel", "16"), ("--ctx-size", "32768"), ("--threads", "2"), ("--port", "8080"), ("--host", "127.0.0.1")):
        assert command[command.index(flag) + 1] == value
    assert "--kv-unified" in command


def test_a_second_invocation_on_the_same_requests_and_plan_is_appended_to_the_first() -> None:
    first = report()
    second = {**report(), "date": "2026-12-03T19:40:00", "load_average": 5.0}
    second["targets"] = [{"name": "llama-server", "description": "llama.cpp", "protocol": "OpenAI"}]
    second["levels"] = [level("llama-server", "closed", 32, 0.1, 100.0, 900.0)]
    merged = append_to(first, second)
    assert [t["name"] for t in merged["targets"]] == ["llm iteration", "llama-server"]
    assert merged["levels"][-1]["load"] == 32 and len(merged["levels"]) == len(first["levels"]) + 1
    assert merged["appended"] == [{"date": "2026-12-03T19:40:00", "load_average": 5.0, "targets": ["llama-server"]}]
    assert "- Appended: llama-server measured in a second invocation at 2026-12-03T19:40:00" in render_markdown(merged)


@pytest.mark.parametrize(
    ("section", "change"),
    [("workload", {"seed": 1}), ("settings", {"seconds": 20.0}), ("slo", None)],
)
def test_runs_that_sent_other_requests_or_another_load_are_not_appended(section: str, change: dict | None) -> None:
    second = report()
    second["targets"] = [{"name": "llama-server", "description": "", "protocol": ""}]
    second[section] = "TTFT <= 2000 ms" if change is None else {**second[section], **change}
    with pytest.raises(ValueError, match=f"cannot append: {section}"):
        append_to(report(), second)


def test_a_target_measured_in_both_runs_is_not_appended_twice() -> None:
    with pytest.raises(ValueError, match="llm iteration already measured"):
        append_to(report(), report())


def test_knob_overrides_for_our_engine_are_checked_against_its_knobs() -> None:
    from tools.bench.llm.targets import parse_knob_overrides

    assert parse_knob_overrides("weights=int4, dtype=auto") == {"weights": "int4", "dtype": "auto"}
    assert parse_knob_overrides("") == {}
    for bad, problem in (("weights=int9", "weights"), ("max_num_seqs", "KNOB=VALUE"), ("mode=none", "--targets"), ("colour=red", "colour")):
        with pytest.raises(ValueError, match=problem):
            parse_knob_overrides(bad)


def test_a_labelled_knob_set_is_a_variant_with_its_own_stream_counts() -> None:
    from tools.bench.llm.targets import EngineVariant, parse_variant

    assert parse_variant("weights=int4,dtype=auto") == EngineVariant({"weights": "int4", "dtype": "auto"})
    int4 = parse_variant("int4@1:weights=int4,compile_decode=true")
    assert int4 == EngineVariant({"weights": "int4", "compile_decode": "true"}, "int4", (1,))
    assert int4.target_name("llm iteration") == "llm iteration [int4]"
    assert parse_variant("bf16@16,32:dtype=auto").concurrency == (16, 32)
    assert parse_variant("bf16:dtype=auto").concurrency is None  # every level
    assert EngineVariant().target_name("engine-loop") == "engine-loop"
    for bad, problem in (
        ("int 4:dtype=auto", "label"),
        ("x@0:dtype=auto", "positive"),
        ("x@a:dtype=auto", "positive"),
        ("x:weights=int9", "weights"),
    ):
        with pytest.raises(ValueError, match=problem):
            parse_variant(bad)


def test_several_variants_need_distinct_labels_and_run_only_their_levels() -> None:
    from tools.bench.llm.__main__ import variant_plan
    from tools.bench.llm.targets import EngineVariant, check_variants

    check_variants([EngineVariant({"dtype": "auto"})])  # one unlabelled set: the names stay as they are
    for variants in ([EngineVariant(), EngineVariant({}, "b")], [EngineVariant({}, "a"), EngineVariant({}, "a")]):
        with pytest.raises(ValueError, match="distinct LABEL"):
            check_variants(variants)
    assert variant_plan(FULL, EngineVariant({}, "a")) == FULL
    one = variant_plan(FULL, EngineVariant({}, "a", (1,)))
    assert (one.concurrency, one.rates, one.seconds) == ((1,), (), FULL.seconds)
    args = build_parser().parse_args(["--set", "int4@1:weights=int4", "--set", "bf16@16,32:dtype=auto"])
    assert [(v.label, v.concurrency) for v in args.variants] == [("int4", (1,)), ("bf16", (16, 32))]


def test_the_comparisons_are_stated_per_variant_of_our_engine() -> None:
    levels = [
        level("llm iteration [int4]", "closed", 1, 0.2, 40.0, 900.0),
        level("engine-loop [int4]", "closed", 1, 0.2, 50.0, 800.0),
        level("llama-server", "closed", 1, 0.2, 30.0, 1000.0),
        level("llm iteration [bf16]", "closed", 16, 0.2, 240.0, 900.0),
        level("vllm", "closed", 16, 0.2, 200.0, 900.0),
    ]
    assert comparisons(levels) == [
        "- 16 streams: our engine's (iteration [bf16]) output tokens/s are 1.20x vLLM's inside Triton "
        "(target at 16 and 32 streams: >= 1.2x)",
        "- 1 streams: our engine served through Triton (iteration [int4]) gives 0.80x the output tokens/s of the same engine in process "
        "(engine-loop [int4]; what the Triton path costs it; target at 1 and 16 streams: >= 0.9x)",
        "- 1 stream: iteration [int4]'s output tokens/s are 1.33x llama-server's, its TPOT p50 1.00x theirs (target: <= 1x)",
    ]


class FakeControl:
    """The model-control calls apply_mode makes, on a config held here."""

    def __init__(self, config) -> None:
        self.running, self.reloads = config, 0

    def config(self, model: str):
        return self.running

    def model_ready(self, model: str) -> bool:
        return True

    def reload(self, model: str, config) -> None:
        self.running, self.reloads = config, self.reloads + 1


def test_each_knob_set_goes_on_top_of_the_runs_starting_config_not_the_previous_sets() -> None:
    from tools.bench.llm.targets import NATIVE_CONFIG, apply_mode
    from tools.repo.model_config import load_config

    start = load_config(NATIVE_CONFIG)
    control = FakeControl(start)
    apply_mode(control, "iteration", overrides={"weights": "int4", "compile_decode": "true"}, base=start)
    assert control.running.parameters["weights"].string_value == "int4" and control.reloads == 1
    apply_mode(control, "iteration", overrides={"dtype": "auto"}, base=start)
    knobs = {key: value.string_value for key, value in control.running.parameters.items()}
    assert (knobs["weights"], knobs["compile_decode"], knobs["dtype"]) == ("dense", "false", "auto")
    apply_mode(control, "iteration", overrides={"dtype": "auto"}, base=start)
    assert control.reloads == 2  # already running that set: no reload
    assert start.parameters["dtype"].string_value != "auto"  # the starting config itself is left as it was
