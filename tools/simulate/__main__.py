"""`python -m tools.simulate`: predict Triton's dynamic batching from a measured cost model.

  calibrate  measure execution time per batch size and length on a server -> cost model JSON
  predict    simulate one config under one load level (throughput, latency per class, batches)
  validate   predict and measure a list of configs under several loads; errors per figure
  adapt      tools.adapt's control law on make bench-adapt's bursty trace vs every static delay
  llm ...    the `llm` model's step-level simulator: calibrate, predict, validate (tools/simulate/llm/cli.py)

Examples:
  python -m tools.simulate calibrate --out build/simulate/cost-model.json
  python -m tools.simulate predict --cost-model build/simulate/cost-model.json \\
      --config model_repository/encoder/config.pbtxt --concurrency 8 --json
  python -m tools.simulate validate --cost-model build/simulate/cost-model.json \\
      --configs tools/simulate/validation-configs.yaml --concurrency 1,8 --rate 40 --json reports/simulate/validation.json
  python -m tools.simulate adapt --cost-model tools/simulate/cost_models/synthetic-gpu.json
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from tools.cli.exit_status import run_reporting_errors
from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.serve.admin_key import add_admin_key_arguments
from tools.simulate.adapt_sim import STATIC_DELAYS_US
from tools.simulate.batcher import BatcherSpec
from tools.simulate.cli import add_model_arguments, add_traffic_arguments, model_settings, read_config, traffic_of
from tools.simulate.predict import Prediction, predict
from tools.simulate.report import prediction_table
from tools.simulate.workload import Workload

log = logging.getLogger("simulate")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.simulate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("predict", help="simulate one config under one load level")
    add_model_arguments(p)
    p.add_argument(
        "--config", type=Path, default=MODEL_REPOSITORY / "encoder" / "config.pbtxt", help="encoder config.pbtxt (default: committed)"
    )
    add_traffic_arguments(p, lists=False)
    p.add_argument("--requests", type=int, default=10_000, help="requests to simulate (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_verbosity_flags(p)

    c = commands.add_parser("calibrate", help="measure a cost model on a server (local default, or --url)")
    c.add_argument("--out", type=Path, default=REPO_ROOT / "build" / "simulate" / "cost-model.json")
    c.add_argument(
        "--url", default=None, help="HTTP host:port of a running Triton in explicit model-control mode (default: start a local one)"
    )
    c.add_argument("--grpc-url", default=None, help="gRPC host:port of that server (default: same host, port 8001)")
    add_admin_key_arguments(c)
    c.add_argument("--batch-sizes", default="1,2,4,8,16,32", help="encoder batch sizes (default %(default)s)")
    c.add_argument("--lengths", dest="seq_lengths", default="8,16,32,64,128", help="padded lengths in tokens (default %(default)s)")
    c.add_argument("--max-tokens", type=int, default=2048, help="skip points with batch x length above this (default %(default)s)")
    c.add_argument("--instances", default="1,2", help="encoder instance counts to measure (default %(default)s)")
    c.add_argument("--repeats", type=int, default=5, help="executions per point (default %(default)s)")
    c.add_argument("--no-plot", action="store_true")
    add_verbosity_flags(c)

    v = commands.add_parser("validate", help="predict and measure configs under several loads")
    add_model_arguments(v)
    v.add_argument("--configs", type=Path, required=True, help="YAML or JSON list of batching configs (docs/simulate.md)")
    add_traffic_arguments(v, lists=True)
    v.add_argument("--json", type=Path, required=True, help="write the rows here")
    v.add_argument(
        "--url", default=None, help="HTTP host:port of a running Triton in explicit model-control mode (default: start a local one)"
    )
    v.add_argument("--grpc-url", default=None)
    add_admin_key_arguments(v)
    v.add_argument("--measured", type=Path, default=None, help="reuse the measurements of an earlier validation OUT (no server)")
    v.add_argument(
        "--base-config",
        type=Path,
        default=MODEL_REPOSITORY / "encoder" / "config.pbtxt",
        help="with --measured: the encoder config the configs were applied to (default: committed)",
    )
    v.add_argument("--requests", type=int, default=4000, help="requests per prediction (default %(default)s)")
    v.add_argument("--no-plot", action="store_true")
    add_verbosity_flags(v)

    a = commands.add_parser("adapt", help="tools.adapt's control law vs every static delay on a bursty trace (no server)")
    a.add_argument("--cost-model", type=Path, required=True, help="cost model JSON")
    a.add_argument("--config", type=Path, default=MODEL_REPOSITORY / "encoder" / "config.pbtxt", help="encoder config (default: committed)")
    a.add_argument("--keep-priority-queues", action="store_true", help="keep the config's priority queues (default: without)")
    a.add_argument("--p99-ms", type=float, default=150.0, help="SLO (default %(default)s, as make bench-adapt)")
    a.add_argument("--seq-len", type=int, default=128, help="tokens per request (default %(default)s)")
    a.add_argument("--low-rate", type=float, default=None, help="req/s in low phases (default: 25%% of batch-1 capacity)")
    a.add_argument("--peak-rate", type=float, default=None, help="req/s in peak phases (default: 75%% of batch-1 capacity)")
    a.add_argument("--phase-s", type=float, default=15.0)
    a.add_argument("--pattern", default="low,peak,low,peak")
    a.add_argument("--delays-us", default=",".join(map(str, STATIC_DELAYS_US)), help="static delays compared (default %(default)s)")
    a.add_argument("--reload-s", type=float, default=2.0, help="seconds a delay change takes to apply (default %(default)s)")
    a.add_argument(
        "--min-delay-us",
        type=int,
        default=0,
        help="the controller's floor, as tools.adapt --min-delay-us: a standby delay it keeps while quiet (default 0)",
    )
    a.add_argument("--json", type=Path, default=None, help="also write the result here")
    add_verbosity_flags(a)
    return parser


def run_adapt(args: argparse.Namespace) -> int:
    from tools.repo.model_config import without_priority_queues
    from tools.simulate.adapt_sim import AdaptSimSettings, evaluate, render
    from tools.simulate.cost_model import CostModel

    try:
        delays = tuple(int(part) for part in args.delays_us.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"--delays-us must be a comma list of whole microseconds, got {args.delays_us!r}") from None
    settings = AdaptSimSettings(
        p99_ms=args.p99_ms,
        seq_len=args.seq_len,
        low_rate=args.low_rate,
        peak_rate=args.peak_rate,
        phase_s=args.phase_s,
        pattern=tuple(args.pattern.split(",")),
        static_delays_us=delays,
        reload_s=args.reload_s,
        min_delay_us=args.min_delay_us,
    )
    cost = CostModel.load(args.cost_model)
    base = read_config(args.config)
    result = evaluate(cost, base if args.keep_priority_queues else without_priority_queues(base), settings)
    print(render(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    return 0


def run_predict(args: argparse.Namespace) -> int:
    settings = model_settings(args)
    encoder = BatcherSpec.from_config(read_config(args.config))
    traffic = traffic_of(args.concurrency, args.rate, args)
    workload = Workload(traffic, args.requests, settings.lengths, settings.cache_hit_rate)
    started = time.perf_counter()
    prediction: Prediction = predict(settings.cost, settings.steps(encoder), workload, settings.seed, settings.stall)
    elapsed = time.perf_counter() - started
    if args.json:
        print(json.dumps({**prediction.to_dict(), "traffic": traffic.label(), "requests": args.requests, "wall_s": elapsed}))
    else:
        print(prediction_table(prediction, f"{args.config} under {traffic.label()}, {settings.lengths.describe()}"))
        log.info("simulated %d requests in %.2f s", args.requests, elapsed)
    return 0


def run(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["llm"]:
        from tools.simulate.llm.cli import run as run_llm

        return run_llm(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args)
    if args.command == "predict":
        return run_reporting_errors(lambda: run_predict(args), log)
    if args.command == "calibrate":
        from tools.simulate.calibrate import run_calibrate

        return run_reporting_errors(lambda: run_calibrate(args), log)
    if args.command == "adapt":
        return run_reporting_errors(lambda: run_adapt(args), log)
    from tools.simulate.validate import run_validate

    return run_reporting_errors(lambda: run_validate(args), log)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
