"""The tuner's command line as typed settings: the parser, its checks and TuneSettings."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from tools.cli.arguments import number_list
from tools.cli.logsetup import add_verbosity_flags
from tools.cli.settings import settings_from
from tools.load.requests import RequestSettings
from tools.loadgen.cli_args import (
    add_load_arguments,
    check_load_arguments,
    measurement_from_args,
    request_settings_from_args,
    traffics_from_args,
)
from tools.loadgen.measure import Measurement
from tools.loadgen.traffic import Traffic
from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.repo.artifacts import ensemble_batch_floor
from tools.serve.admin_key import add_admin_key_arguments, resolve_admin_key
from tools.simulate.cost_model import CostModel
from tools.tune.objectives import OBJECTIVES

PREFERRED_DEFAULT = "none,half"


@dataclass(frozen=True)
class TuneSettings:
    """The command line as typed values; built once in `run()`, read by everything below."""

    model: str  # the model whose config is tuned
    load_model: str  # the model the traffic is sent to (the ensemble serving `model`, by default)
    p99_ms: float
    objective: str
    requests: RequestSettings  # what each request carries; the served load model's config says texts or token ids
    traffics: list[Traffic]
    measurement: Measurement
    protocol: str
    seq_len: int  # tokens per row of the batch curve
    url: str | None = None  # a running server, or None to start a local one
    grpc_url: str | None = None
    admin_key: str | None = None
    space: Path | None = None  # YAML search space
    max_batch_sizes: list[int] | None = None
    delays_us: list[int] | None = None
    preferred: str = PREFERRED_DEFAULT
    instances: list[int] = field(default_factory=lambda: [1, 2])
    priority_queues: str = "auto"
    priority_mix: bool = False  # the traffic carries a priority mix
    strategy: str = "hill-climb"
    cost_model: str = "auto"  # model-guided: a cost model file, auto or calibrate (tools/tune/guided.py)
    top: int = 3  # model-guided: candidates measured live besides the control
    max_trials: int = 14
    confirm: int = 3
    resume: bool = False
    report_dir: Path = REPO_ROOT / "reports" / "tune"
    output: Path | None = None
    apply: bool = False
    plots: bool = True

    @staticmethod
    def check_cli_args(args: argparse.Namespace) -> None:
        """Refuse out-of-range options before any server starts (ValueError names the option)."""
        if not args.p99_ms > 0:  # NaN too
            raise ValueError(f"--p99-ms is a latency SLO and must be above 0 ms, got {args.p99_ms:g}")
        if args.max_trials < 1:
            raise ValueError(f"--max-trials must be at least 1, got {args.max_trials}")
        if args.top < 1:
            raise ValueError(f"--top must be at least 1, got {args.top}")
        if args.strategy == "model-guided" and args.cost_model not in ("auto", "calibrate"):
            CostModel.load(Path(args.cost_model))  # a missing or malformed file is refused before any server starts
        if args.strategy == "model-guided" and args.model != "encoder" and args.cost_model in ("auto", "calibrate"):
            raise ValueError("--strategy model-guided calibrates the encoder only: give --cost-model FILE for another model")
        if args.confirm < 0:
            raise ValueError(f"--confirm cannot be negative, got {args.confirm}")
        for option, values, least in (
            ("--max-batch-sizes", args.max_batch_sizes, 1),
            ("--delays-us", args.delays_us, 0),
            ("--instances", args.instances, 1),
        ):
            if values is not None and (not values or min(values) < least):
                raise ValueError(f"{option} values must be at least {least}, got {values}")
        check_load_arguments(args)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> TuneSettings:
        """Typed settings from the parsed command line (ValueError names a bad option)."""
        load_model = args.load_model or default_load_model(args.model)
        # The batch curve is measured at the traffic's length: texts through the ensemble pad
        # to 16-48 tokens; direct encoder traffic uses --seq-len (128 as in Model Analyzer's run).
        seq_len = args.seq_len or (32 if load_model != args.model else 128)
        return settings_from(
            cls,
            args,
            load_model=load_model,
            requests=request_settings_from_args(args, seq_len),
            traffics=traffics_from_args(args),
            measurement=measurement_from_args(args, models=(args.model,)),
            seq_len=seq_len,
            admin_key=resolve_admin_key(args.admin_key_file, args.admin_key),
            priority_mix=bool(args.priority_mix),
            report_dir=args.report_dir or REPO_ROOT / "reports" / f"tune-{args.model}",
            plots=not args.no_plots,
        )


def build_parser(description: str | None = None) -> argparse.ArgumentParser:
    """The options; `description` is the command's help text (tools/tune/__main__.py's docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.tune", description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--p99-ms", type=float, required=True, help="latency SLO: p99 in milliseconds")
    parser.add_argument("--objective", choices=OBJECTIVES, default="throughput-slo")
    add_load_arguments(parser, default_model="encoder", default_concurrency="1,4,16")
    parser.add_argument("--load-model", default=None, help="model the traffic is sent to (default: the ensemble serving --model)")
    add_admin_key_arguments(parser)
    parser.set_defaults(warmup=1.0, window=2.0, max_windows=4, seq_len=None)
    space = parser.add_argument_group("search space (default: derived from the model's measured batch curve)")
    space.add_argument("--space", type=Path, default=None, help="YAML file with max_batch_sizes, delays_us, preferred_styles, instances")
    space.add_argument("--max-batch-sizes", type=lambda t: number_list(t, int), default=None)
    space.add_argument("--delays-us", type=lambda t: number_list(t, int), default=None)
    space.add_argument(
        "--preferred",
        default=PREFERRED_DEFAULT,
        help="preferred-size styles: none, max, half, or sizes like 4+8 (default %(default)s, plus the knee)",
    )
    space.add_argument("--instances", type=lambda t: number_list(t, int), default=[1, 2], help="instance counts (default 1,2)")
    space.add_argument(
        "--priority-queues",
        choices=("auto", "keep", "try-without"),
        default="auto",
        help="keep the committed priority levels and queue policies in every candidate, or also try configs without them "
        "(an unbounded single queue; Triton 2.51 serves that faster at low load). auto: keep them when the traffic has a "
        "--priority-mix or the objective is mixed, else try both",
    )
    search = parser.add_argument_group("search")
    search.add_argument(
        "--strategy",
        choices=("hill-climb", "grid", "model-guided"),
        default="hill-climb",
        help="model-guided: simulate a fine space, measure only the --top few and Triton's default",
    )
    search.add_argument(
        "--cost-model",
        default="auto",
        help="model-guided: a cost model JSON, `calibrate` (a quick one on the server being tuned) or `auto` "
        "(the shipped measured one when this CPU matches it, else calibrate; default)",
    )
    search.add_argument("--top", type=int, default=3, help="model-guided: candidates measured live (default %(default)s)")
    search.add_argument("--max-trials", type=int, default=14, help="hill-climb budget (default %(default)s)")
    search.add_argument("--confirm", type=int, default=3, help="re-measure this many best configs; each keeps its worse run (default 3)")
    search.add_argument("--resume", action="store_true", help="reuse trials from the report folder's checkpoint")
    output = parser.add_argument_group("output")
    output.add_argument("--report-dir", type=Path, default=None, help="default reports/tune-<model>")
    output.add_argument("--output", type=Path, default=None, help="winner config path (default <report-dir>/config.pbtxt)")
    output.add_argument("--apply", action="store_true", help="also write the winner into model_repository/<model>/config.pbtxt")
    output.add_argument("--no-plots", action="store_true")
    add_verbosity_flags(parser)
    return parser


def default_load_model(model: str) -> str:
    """Drive load through the ensemble that serves the model (the path users call), so
    tokenisation and padding shape the batches as in production; the model itself when no
    ensemble uses it. Direct calls also miss a Triton 2.51 stall: with priority levels or
    queue policies, a request sent straight to a Python-backend model at low concurrency
    sometimes waits ~500 ms (README, "The priority-queue tax")."""
    _, ensembles = ensemble_batch_floor(MODEL_REPOSITORY, model)
    return ensembles[0] if ensembles else model
