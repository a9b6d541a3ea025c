"""The LLM commands read their options once into typed settings: defaults as the parsers
declare them, and an out-of-range option refused by name before anything starts."""

from __future__ import annotations

import pytest

from tools.adapt.llm import cli as adapt_llm
from tools.adapt.llm.settings import BenchSettings, LiveSettings
from tools.cli.arguments import parse_settings
from tools.load.schedules import ClosedLoop, Poisson
from tools.reliability.llm import soak as soak_llm
from tools.simulate.llm import capacity
from tools.simulate.llm.slo import LlmSlo
from tools.tune.llm import command as tune_llm


def test_adapt_bench_settings_carry_the_law_and_record_every_option_for_the_report() -> None:
    settings = parse_settings(adapt_llm.build_parser(), ["bench", "--budgets", "64,512", "--min-budget", "32"], BenchSettings.from_cli_args)
    assert settings.budgets == [64, 512] and settings.rate == 0.3 and settings.deadline_s == 180.0
    assert settings.control.law.min_budget == 32 and settings.control.law.default.max_num_batched_tokens == 512
    assert settings.control.window_s == 10.0 and settings.control.law.ttft_slo_s == settings.control.slo.ttft_s == 10.0
    assert settings.command_line["budgets"] == [64, 512] and settings.command_line["command"] == "bench"
    assert settings.command_line["json"] == "None", "every option is recorded, a non-number as its text"


def test_adapt_live_settings_read_the_server_and_the_law() -> None:
    argv = ["live", "--grpc-url", "h:1", "--metrics-url", "h:2", "--dry-run", "--window", "5"]
    settings = parse_settings(adapt_llm.build_parser(), argv, LiveSettings.from_cli_args)
    assert (settings.grpc_url, settings.metrics_url, settings.dry_run, settings.duration_s) == ("h:1", "h:2", True, None)
    assert settings.control.window_s == 5.0


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["bench", "--rate", "0"], "--rate"),
        (["bench", "--requests", "0"], "--requests"),
        (["bench", "--window", "0"], "--window"),
        (["bench", "--min-budget", "600"], "--min-budget"),
        (["live", "--grpc-url", "h:1", "--metrics-url", "h:2", "--confirm-windows", "0"], "--confirm-windows"),
    ],
)
def test_adapt_llm_refuses_an_out_of_range_option_by_name(argv: list[str], option: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        adapt_llm.run(argv)
    assert exit_.value.code == 2 and option in capsys.readouterr().err


def test_llm_soak_settings_are_the_soaks_own_with_the_options_given() -> None:
    command = parse_settings(soak_llm.build_parser(), ["--duration", "40", "--max-tokens", "8"], soak_llm.SoakCommand.from_cli_args)
    assert command.soak == soak_llm.SoakSettings(duration_s=40.0, max_tokens=8)
    assert command.output.name == "soak-llm"


@pytest.mark.parametrize("option", ["--duration", "--rate", "--window", "--max-tokens"])
def test_llm_soak_refuses_a_non_positive_option_by_name(option: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        soak_llm.run([option, "0"])
    assert exit_.value.code == 2 and f"{option} must be a number above 0" in capsys.readouterr().err


def test_plan_llm_settings_parse_the_slo_and_keep_the_defaults() -> None:
    argv = ["--model", "llm", "--rate", "2", "--slo", "ttft_p99=2s,tpot_p99=150ms", "--set", "max_num_seqs=8"]
    settings = parse_settings(capacity.build_parser(), argv, capacity.CapacitySettings.from_cli_args)
    assert settings.slo == LlmSlo(2.0, 0.15) and settings.overrides == {"max_num_seqs": "8"}
    assert (settings.rate, settings.headroom, settings.requests, settings.seconds, settings.json) == (2.0, 0.2, 500, 120.0, None)


@pytest.mark.parametrize(
    ("argv", "option"),
    [(["--rate", "0"], "--rate"), (["--rate", "1", "--slo", "ttft=1"], "--slo"), (["--rate", "1", "--headroom", "-0.1"], "--headroom")],
)
def test_plan_llm_refuses_an_out_of_range_option_by_name(argv: list[str], option: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        capacity.run(["--model", "llm", *argv])
    assert exit_.value.code == 2 and option in capsys.readouterr().err


def test_tune_llm_settings_resolve_quick_defaults_the_schedule_and_the_winners_target() -> None:
    parser = tune_llm.build_parser()
    quick = parse_settings(parser, ["--model", "llm", "--quick", "--apply"], tune_llm.LlmTuneSettings.from_cli_args)
    assert quick.top == 2 and (quick.level.seconds, quick.level.drain_s) == (20.0, 30.0)
    assert quick.schedule == ClosedLoop(8) and quick.winner_output == quick.config
    full = parse_settings(parser, ["--model", "llm", "--rate", "0.5", "--top", "5"], tune_llm.LlmTuneSettings.from_cli_args)
    assert full.top == 5 and (full.level.seconds, full.level.drain_s) == (40.0, 40.0)
    assert full.schedule == Poisson(0.5) and full.winner_output is None


def test_tune_llm_refuses_a_non_positive_rate_instead_of_tuning_a_closed_loop(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        tune_llm.run(["--model", "llm", "--rate", "0"])
    assert exit_.value.code == 2 and "--rate" in capsys.readouterr().err
