"""The typed settings of `python -m tools.adapt --model llm`: the control law's options and each
subcommand's, each read from the command line by its own `from_cli_args`.

A module of their own so that the command (cli.py) and the benchmark it runs (bench.py) both
import them, and neither imports the other's module.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

from tools.adapt.llm.control import LlmLaw, LlmSetting
from tools.load.llm.figures import Slo
from tools.load.llm.workload import LengthRange


@dataclass(frozen=True)
class LlmControlSettings:
    """The control law's options, shared by `live` and `bench`."""

    slo: Slo
    law: LlmLaw
    window_s: float  # seconds per observation window

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> LlmControlSettings:
        """ValueError names the option it refuses."""
        if not 0 < args.window < math.inf:
            raise ValueError(f"--window must be a number of seconds above 0, got {args.window:g}")
        if not 0 < args.min_budget <= args.default_budget <= args.max_budget:
            raise ValueError(
                "--min-budget, --default-budget and --max-budget must satisfy 0 < min <= default <= max, got "
                f"{args.min_budget}, {args.default_budget}, {args.max_budget}"
            )
        if args.confirm_windows < 1:
            raise ValueError(f"--confirm-windows must be at least 1, got {args.confirm_windows}")
        law = LlmLaw(
            args.slo.ttft_s,
            args.slo.tpot_s,
            default=LlmSetting(args.default_budget, 0.0),
            min_budget=args.min_budget,
            max_budget=args.max_budget,
            min_samples=args.min_samples,
            confirm_windows=args.confirm_windows,
            min_interval_s=args.min_interval,
        )
        return cls(args.slo, law, args.window)


@dataclass(frozen=True)
class LiveSettings:
    """`live`: a running server to control."""

    grpc_url: str
    metrics_url: str  # host:port of Triton's metrics endpoint
    key_file: Path | None  # None: $LLM_CONTROL_KEY
    duration_s: float | None  # None (or 0): until Ctrl-C
    dry_run: bool
    control: LlmControlSettings

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> LiveSettings:
        return cls(args.grpc_url, args.metrics_url, args.key_file, args.duration, args.dry_run, LlmControlSettings.from_cli_args(args))


@dataclass(frozen=True)
class BenchSettings:
    """`bench`: the trace the static settings and the controller are replayed on."""

    rate: float  # mean arrivals per second
    burstiness: float  # gamma shape
    prompt_lengths: LengthRange
    output_lengths: LengthRange
    requests: int
    seconds: float
    deadline_s: float  # a request still streaming this long after its send is cut
    seed: int
    budgets: list[int]  # the static settings' budgets
    json: Path | None
    control: LlmControlSettings
    command_line: dict  # every option as given, recorded in the JSON report

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> BenchSettings:
        """ValueError names the option it refuses."""
        for option, value in (("--rate", args.rate), ("--burstiness", args.burstiness), ("--seconds", args.seconds)):
            if not 0 < value < math.inf:
                raise ValueError(f"{option} must be a number above 0, got {value:g}")
        if args.requests < 1:
            raise ValueError(f"--requests must be at least 1, got {args.requests}")
        command_line = {k: v if isinstance(v, int | float | list) else str(v) for k, v in vars(args).items()}
        return cls(
            args.rate,
            args.burstiness,
            args.prompt_lengths,
            args.output_lengths,
            args.requests,
            args.seconds,
            args.deadline,
            args.seed,
            args.budgets,
            args.json,
            LlmControlSettings.from_cli_args(args),
            command_line,
        )
