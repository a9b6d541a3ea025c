"""Bad arguments end in one argparse-style error and exit status 2 before anything starts:
no server, no traceback. Each command runs as a subprocess, as a user would type it;
loadgen and tune point at a port nothing listens on, so a missed check fails at once
instead of starting a server."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from tools.paths import REPO_ROOT

NOWHERE = ["--url", "127.0.0.1:1"]

BAD = [
    (["tools.loadgen", "--trace", "missing.txt", *NOWHERE], "cannot read the trace file missing.txt"),
    (["tools.loadgen", "--window", "0", *NOWHERE], "--window"),
    (["tools.loadgen", "--max-windows", "0", *NOWHERE], "--max-windows"),
    (["tools.loadgen", "--warmup", "-1", *NOWHERE], "--warmup"),
    (["tools.loadgen", "--concurrency", "1", "--rate", "5", *NOWHERE], "--concurrency (closed loop) or --rate (open loop), not both"),
    (["tools.loadgen", "--concurrency", "0", *NOWHERE], "--concurrency values must be at least 1"),
    (["tools.loadgen", "--rate", "-3", *NOWHERE], "--rate values must be above 0"),
    (["tools.loadgen", "--burst-rate", "100", *NOWHERE], "--burst-rate alternates with --rate"),
    (["tools.loadgen", "--seq-len", "0", "--model", "encoder", *NOWHERE], "--seq-len"),
    (["tools.loadgen", "--priority-mix", "1:0.5", *NOWHERE], "add up to 1"),
    (["tools.loadgen", "--texts", "mixed", "--texts-per-request", "4", *NOWHERE], "--texts mixed sends one text per request"),
    (["tools.loadgen", "--texts", "mixed", "--passage-share", "1.5", *NOWHERE], "--passage-share must be within 0..1"),
    (["tools.loadgen", "--texts", "mixed", "--short-tokens", "30-5", *NOWHERE], "--short-tokens: short token range 30-5"),
    (["tools.loadgen", "--texts", "mixed", "--long-tokens", "long", *NOWHERE], "--long-tokens: token range 'long' is not LOW-HIGH"),
    (["tools.tune", "--p99-ms", "-5", *NOWHERE], "--p99-ms"),
    (["tools.tune", "--p99-ms", "50", "--max-trials", "0", *NOWHERE], "--max-trials must be at least 1"),
    (["tools.tune", "--p99-ms", "50", "--window", "0", *NOWHERE], "--window"),
    (["tools.reliability.soak", "--rate", "-1"], "--rate must be a number above 0"),
    (["tools.reliability.soak", "--minutes", "0"], "--minutes must be a number above 0"),
    (["tools.reliability.soak", "--window", "0"], "--window must be a number above 0"),
    (["tools.reliability.overload", "--rate", "0"], "--rate must be a number above 0"),
    (["tools.reliability.overload", "--runs", "0"], "--runs must be at least 1"),
    (["tools.reliability.overload", "--seconds", "0"], "--seconds must be at least 1"),
    (["tools.reliability.overload", "--queue", "0"], "--queue must be at least 1"),
]


@pytest.mark.parametrize("argv, message", BAD, ids=[" ".join(arg for arg in argv if arg not in NOWHERE) for argv, _ in BAD])
def test_a_bad_invocation_exits_2_with_a_message_before_starting_anything(argv: list[str], message: str) -> None:
    done = subprocess.run([sys.executable, "-m", *argv], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "error:" in done.stderr and "Traceback" not in done.stderr
    assert "starting a local Triton" not in done.stderr


def test_rate_alone_is_accepted_by_tune_whose_default_is_a_concurrency_list() -> None:
    """tune's default traffic (concurrency 1,4,16) must not collide with a --rate the user gives."""
    done = subprocess.run(
        [sys.executable, "-m", "tools.tune", "--p99-ms", "50", "--rate", "40", *NOWHERE],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "no ready Triton answers at http://127.0.0.1:1" in done.stderr and "Traceback" not in done.stderr


def test_one_comma_list_parser_serves_argparse_and_the_code_below_it() -> None:
    from tools.cli.arguments import ListError, number_list

    assert number_list("1,4, 16", int) == [1, 4, 16] and number_list(None, float) == []
    with pytest.raises(ValueError, match="--rate must be a comma-separated list of numbers, got 'x'"):
        number_list("x", float, "--rate")
    parser = argparse.ArgumentParser()
    parser.add_argument("--delays-us", type=lambda t: number_list(t, int))
    with pytest.raises(SystemExit):
        parser.parse_args(["--delays-us", "1,two"])
    assert issubclass(ListError, argparse.ArgumentTypeError)
