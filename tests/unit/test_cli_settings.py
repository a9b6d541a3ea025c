"""Entry points turn their command line into typed settings; nothing below reads a Namespace."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import pytest

from tools import plan
from tools.adapt import __main__ as adapt
from tools.adapt import evaluate
from tools.bench import lengths
from tools.bench.gateway import __main__ as bench_gateway
from tools.bench.gateway.settings import GatewayBenchSettings
from tools.bench.lengths import LengthsBenchSettings
from tools.cli.arguments import parse_checked, parse_settings
from tools.cli.settings import settings_from
from tools.paths import REPO_ROOT
from tools.plan import PlanSettings
from tools.reliability import overload, soak
from tools.reliability.overload import OverloadSettings
from tools.reliability.soak import SoakSettings
from tools.simulate import __main__ as simulate
from tools.simulate.calibrate import CalibrateSettings
from tools.simulate.validate import ValidateSettings
from tools.tune.settings import TuneSettings, build_parser

SYNTHETIC = REPO_ROOT / "tools" / "simulate" / "cost_models" / "synthetic-gpu.json"


@dataclass(frozen=True)
class Example:
    model: str
    window_s: float
    verbose: bool = False


def test_fields_named_like_arguments_are_taken_and_the_rest_is_computed() -> None:
    args = argparse.Namespace(model="encoder", window=2.0, unrelated="x")
    assert settings_from(Example, args, window_s=args.window) == Example("encoder", 2.0)


def test_a_computed_value_for_no_field_is_a_mistake() -> None:
    with pytest.raises(TypeError, match="no field"):
        settings_from(Example, argparse.Namespace(model="m"), window_s=1.0, windw=2.0)


def test_tune_settings_carry_the_load_model_its_length_and_the_key(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("secret\n")
    key_file.chmod(0o600)
    argv = ["--model", "encoder", "--p99-ms", "80", "--admin-key-file", str(key_file), "--no-plots", "--rate", "5"]
    settings = TuneSettings.from_cli_args(build_parser().parse_args(argv))
    assert settings.load_model == "embed", "traffic goes through the ensemble that serves the encoder"
    assert settings.seq_len == 32 and settings.admin_key == "secret" and not settings.plots
    assert settings.report_dir.name == "tune-encoder" and len(settings.traffics) == 1


def test_adapt_settings_keep_the_law_apart_from_the_session() -> None:
    argv = ["--p99-ms", "150", "--window", "3", "--min-interval", "5", "--batching-gain", "1.5", "--admin-key", "k"]
    settings = adapt.settings_from_args(adapt.build_parser().parse_args(argv))
    assert (settings.window_s, settings.law.min_interval_s, settings.law.p99_ms) == (3.0, 5.0, 150.0)
    assert settings.batching_gain == 1.5 and settings.admin_key == "k"


def test_evaluate_settings_parse_the_pattern_and_delays() -> None:
    argv = ["--pattern", "low,peak", "--delays-us", "0,5000", "--control-window", "1.5"]
    settings = evaluate.EvaluateSettings.from_cli_args(evaluate.build_parser().parse_args(argv))
    assert settings.pattern == ("low", "peak") and settings.delays_us == (0, 5000) and settings.control_window_s == 1.5


def test_parse_checked_turns_a_refused_option_into_a_usage_error(capsys) -> None:
    parser = argparse.ArgumentParser(prog="demo")
    parser.add_argument("--rate", type=float, default=1.0)
    parser.add_argument("-v", "--verbose", action="count", default=0)
    parser.add_argument("-q", "--quiet", action="count", default=0)

    def check(args: argparse.Namespace) -> None:
        if args.rate <= 0:
            raise ValueError(f"--rate must be above 0, got {args.rate:g}")

    assert parse_checked(parser, ["--rate", "2"], check).rate == 2.0
    with pytest.raises(SystemExit) as exit_info:
        parse_checked(parser, ["--rate", "0"], check)
    assert exit_info.value.code == 2
    assert "--rate must be above 0, got 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("parser_of", "settings_type", "argv", "refused"),
    [
        (bench_gateway.build_parser, GatewayBenchSettings, ["--seconds", "0"], "--seconds must be positive"),
        (overload.build_parser, OverloadSettings, ["--runs", "0"], "--runs must be at least 1"),
        (soak.build_parser, SoakSettings, ["--window", "0"], "--window must be a number above 0"),
        (lengths.build_parser, LengthsBenchSettings, ["--short-tokens", "9-3"], "--short-tokens"),
    ],
)
def test_parse_settings_gives_typed_settings_or_names_the_refused_option(
    parser_of, settings_type: type, argv: list[str], refused: str, capsys
) -> None:
    assert isinstance(parse_settings(parser_of(), [], settings_type.from_cli_args), settings_type)
    with pytest.raises(SystemExit) as exit_info:
        parse_settings(parser_of(), argv, settings_type.from_cli_args)
    assert exit_info.value.code == 2
    assert refused in capsys.readouterr().err


def test_bench_settings_carry_computed_values_not_the_raw_flags() -> None:
    settings = parse_settings(bench_gateway.build_parser(), ["--no-infinity", "--warmup", "0.5"], GatewayBenchSettings.from_cli_args)
    assert not settings.infinity and settings.warmup_s == 0.5
    argv = ["--passage-share", "0.5", "--priority-mix", "1:0.2,2:0.8"]
    lengths_settings = parse_settings(lengths.build_parser(), argv, LengthsBenchSettings.from_cli_args)
    assert lengths_settings.mix.passage_share == 0.5 and lengths_settings.priority_mix == {1: 0.2, 2: 0.8}


def test_validate_settings_hold_one_traffic_per_level_and_refuse_an_empty_load() -> None:
    base = ["validate", "--cost-model", str(SYNTHETIC), "--configs", "c.yaml", "--json", "out.json", "--pipeline", "encoder"]
    settings = ValidateSettings.from_cli_args(simulate.build_parser().parse_args([*base, "--concurrency", "1,8", "--rate", "40"]))
    assert [traffic.label() for traffic in settings.loads][:2] == ["concurrency 1", "concurrency 8"] and len(settings.loads) == 3
    with pytest.raises(ValueError, match="no requests"):
        ValidateSettings.from_cli_args(simulate.build_parser().parse_args(base))


def test_calibrate_and_plan_settings_refuse_what_cannot_run() -> None:
    with pytest.raises(ValueError, match="--batch-sizes"):
        CalibrateSettings.from_cli_args(simulate.build_parser().parse_args(["calibrate", "--batch-sizes", "0,2"]))
    argv = ["--cost-model", str(SYNTHETIC), "--rate", "100", "--p99-ms", "50", "--headroom", "-1"]
    with pytest.raises(ValueError, match="--headroom"):
        PlanSettings.from_cli_args(plan.build_parser().parse_args(argv))
