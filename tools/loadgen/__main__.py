"""`python -m tools.loadgen`: measure one model under closed- or open-loop load.

Examples:
  python -m tools.loadgen --model embed --concurrency 1,16
  python -m tools.loadgen --model encoder --seq-len 128 --rate 50,100 --distribution poisson
  python -m tools.loadgen --model embed --rate 40 --burst-rate 160 --burst-period 4 --priority-mix 1:0.2,2:0.8
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from tools.loadgen.cli_args import add_load_arguments, measurement_from_args, target_from_args, traffics_from_args
from tools.loadgen.measure import run_load
from tools.loadgen.perf_csv import write_perf_csv
from tools.local_triton import TritonStartError
from tools.logsetup import add_verbosity_flags, configure_logging
from tools.server_session import triton_endpoints

log = logging.getLogger("loadgen")


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.loadgen", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_load_arguments(parser)
    parser.add_argument("--json", type=Path, default=None, help="write every result to this JSON file")
    parser.add_argument("--csv", type=Path, default=None, help="write the levels as perf_analyzer's CSV (`perf_analyzer -f`)")
    add_verbosity_flags(parser)
    args = parser.parse_args(argv)
    configure_logging(args)
    try:
        traffics = traffics_from_args(args)
        target = target_from_args(args)
        measurement = measurement_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    results = []
    try:
        with triton_endpoints(args.url, args.grpc_url) as endpoints:
            for index, traffic in enumerate(traffics, start=1):
                log.info("[%d/%d] %s on %s over %s", index, len(traffics), traffic.label(), target.describe, args.protocol)
                result = run_load(target, traffic, measurement, endpoints.url_for(args.protocol), args.protocol, endpoints.http_url)
                print(result.one_line(), flush=True)
                results.append(result)
    except TritonStartError as exc:
        log.error("%s", exc)
        return 1
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([r.to_dict() for r in results], indent=2))
        log.info("wrote %s", args.json)
    if args.csv:
        log.info("wrote %s", write_perf_csv(results, args.csv))
    return 0 if all(r.sent for r in results) else 1


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
