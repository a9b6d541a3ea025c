"""`python -m tools.loadgen`: measure one model under closed- or open-loop load.

Examples:
  python -m tools.loadgen --model embed --concurrency 1,16
  python -m tools.loadgen --model encoder --seq-len 128 --rate 50,100 --distribution poisson
  python -m tools.loadgen --model embed --rate 40 --burst-rate 160 --burst-period 4 --priority-mix 1:0.2,2:0.8
  python -m tools.loadgen --model llm --concurrency 1,4 --duration 20 --goodput ttft:1000 tpot:100
  python -m tools.loadgen --model llm --rate 0.5 --burstiness 0.5 --num-prompts 40 --workload shared-prefix
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from tools.cli.arguments import parse_checked
from tools.cli.exit_status import run_reporting_errors
from tools.cli.logsetup import add_verbosity_flags
from tools.contract import LLM_MODEL
from tools.load.requests import check_target, fetch_model_config, served_models
from tools.loadgen.cli_args import add_load_arguments, check_load_arguments, measurement_from_args, target_from_args, traffics_from_args
from tools.loadgen.llm.args import LlmLoadSettings, add_llm_arguments
from tools.loadgen.llm.load import is_generative, measure_llm
from tools.loadgen.llm.report import LlmLevelResult, write_llm_csv
from tools.loadgen.measure import run_load
from tools.loadgen.perf_csv import write_perf_csv
from tools.loadgen.report import LoadResult
from tools.machine import cpu_description
from tools.serve.server_session import Endpoints, triton_endpoints

log = logging.getLogger("loadgen")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.loadgen", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_load_arguments(parser)
    add_llm_arguments(parser)
    parser.add_argument(
        "--json", type=Path, default=None, help="write every result (a generative model: every request's record) to this JSON file"
    )
    parser.add_argument(
        "--csv",
        type=Path,
        default=None,
        help="write the levels as perf_analyzer's CSV (`perf_analyzer -f`); a generative model: GenAI-Perf's metric names",
    )
    add_verbosity_flags(parser)
    return parser


def measure(args: argparse.Namespace) -> int:
    traffics = traffics_from_args(args)
    results: list[LoadResult] = []
    with triton_endpoints(args.url, args.grpc_url, serve_llm=args.model == LLM_MODEL) as endpoints:
        config = fetch_model_config(endpoints.http_url, args.model)  # what the model takes decides the requests
        if is_generative(config):
            return measure_generative(args, LlmLoadSettings.from_cli_args(args, traffics), endpoints)
        target = target_from_args(args, config)
        check_target(endpoints.http_url, target)
        measurement = measurement_from_args(args, served_models(config))
        for index, traffic in enumerate(traffics, start=1):
            log.info("[%d/%d] %s on %s over %s", index, len(traffics), traffic.label(), target.describe, args.protocol)
            result = run_load(target, traffic, measurement, endpoints.url_for(args.protocol), args.protocol, endpoints.http_url)
            print(result.table(), flush=True)
            results.append(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([r.to_dict() for r in results], indent=2))
        log.info("wrote %s", args.json)
    if args.csv:
        log.info("wrote %s", write_perf_csv(results, args.csv))
    empty = [r.traffic for r in results if not r.sent]
    if empty:
        log.error("no request was sent in the measured windows of: %s", ", ".join(empty))
        return 1
    return 0


def measure_generative(args: argparse.Namespace, settings: LlmLoadSettings, endpoints: Endpoints) -> int:
    """A decoupled model's levels: per-token figures, every record in --json, GenAI-Perf's names in --csv."""
    ignored = [option for option, given in (("--priority-mix", args.priority_mix), ("--timeout-us", args.timeout_us is not None)) if given]
    if ignored:
        raise ValueError(f"{' and '.join(ignored)} do not apply to a generative model ({args.model} is decoupled)")
    results = measure_llm(settings, args.model, endpoints.http_url, endpoints.grpc_url)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        document = {
            "model": args.model,
            "api": settings.describe_api(),
            "workload": settings.workload.describe(),
            "slo": settings.slo.describe(),
            "cpu": cpu_description(),
            "load_average_1m": round(os.getloadavg()[0], 2),  # on a shared machine, what else was running
            "levels": [result.to_dict() for result in results],
        }
        args.json.write_text(json.dumps(document, indent=1))
        log.info("wrote %s", args.json)
    if args.csv:
        log.info("wrote %s", write_llm_csv(results, args.csv))
    return _report_empty(results)


def _report_empty(results: list[LlmLevelResult]) -> int:
    empty = [r.label for r in results if not r.figures.completed]
    if empty:
        log.error("no request completed in: %s", ", ".join(empty))
        return 1
    return 0


def check_arguments(args: argparse.Namespace) -> None:
    """The load options, and the generative options (whichever the model turns out to be)."""
    check_load_arguments(args)
    LlmLoadSettings.from_cli_args(args, traffics_from_args(args))


def run(argv: list[str] | None = None) -> int:
    args = parse_checked(build_parser(), argv, check_arguments)
    return run_reporting_errors(lambda: measure(args), log)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
