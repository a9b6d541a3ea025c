"""The gateway's options are declared once (gateway/settings.py, OPTIONS): `python -m gateway`
and `python -m tools.serve` (as --gateway-*) read the same table, and settings reach the child
gateway as its own options, never as a string to split."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gateway.__main__ import build_parser as gateway_parser
from gateway.settings import OPTIONS, GatewaySettings
from tools.ports import free_ports
from tools.serve.__main__ import build_parser as serve_parser
from tools.serve.cli_gateway import SET_BY_SERVE, gateway_from_args


def flags(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


@pytest.fixture
def tokenizer(tmp_path: Path) -> Path:
    path = tmp_path / "tokenizer.json"
    path.write_text("{}")
    return path


def test_serve_offers_every_gateway_option_it_does_not_set_itself_with_a_prefix() -> None:
    assert {f"--{o.flag}" for o in OPTIONS} <= flags(gateway_parser())
    expected = {f"--gateway-{o.flag}" for o in OPTIONS if o.flag not in SET_BY_SERVE}
    assert expected <= flags(serve_parser())
    assert "--gateway-args" not in flags(serve_parser())


def test_settings_travel_to_the_child_as_its_own_options_and_come_back_equal(tokenizer: Path) -> None:
    settings = GatewaySettings(triton_url="127.0.0.1:9001", port=9090, tokenizer_path=tokenizer, max_inputs=8, request_timeout_s=2.5)
    argv = settings.to_cli_args()
    assert argv[:2] == ["--triton-url", "127.0.0.1:9001"] and "--max-inputs" in argv
    assert GatewaySettings.from_cli_args(gateway_parser().parse_args(argv)) == settings


def test_serve_flags_become_the_gateway_childs_command(tokenizer: Path) -> None:
    (port,) = free_ports(1)
    argv = ["--gateway-port", str(port), "--gateway-max-inputs", "8", "--gateway-tokenizer", str(tokenizer)]
    gateway = gateway_from_args(serve_parser().parse_args(argv), "127.0.0.1", 9001)
    assert gateway is not None
    command = gateway.command()
    assert command[command.index("--triton-url") + 1] == "127.0.0.1:9001"
    assert command[command.index("--port") + 1] == str(port)
    assert command[command.index("--max-inputs") + 1] == "8"


def test_a_bad_gateway_setting_is_refused_under_serves_own_flag_name(tokenizer: Path) -> None:
    from tools.serve.gateway_process import GatewayStartError

    args = serve_parser().parse_args(["--gateway-max-inputs", "0", "--gateway-tokenizer", str(tokenizer)])
    with pytest.raises(GatewayStartError, match="--gateway-max-inputs"):
        gateway_from_args(args, "127.0.0.1", 9001)
