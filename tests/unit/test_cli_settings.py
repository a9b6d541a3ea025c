"""Entry points turn their command line into typed settings; nothing below reads a Namespace."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import pytest

from tools.adapt import __main__ as adapt
from tools.adapt import evaluate
from tools.cli.arguments import parse_checked
from tools.cli.settings import settings_from
from tools.tune.settings import TuneSettings, build_parser


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
