"""`python -m tools.tune`: the batching config with the most throughput inside a p99 SLO.

Candidates (max_batch_size, preferred sizes, max_queue_delay_microseconds, instance
count) derive from the config the server runs (read from the server, so a GPU/TensorRT
server keeps its own); each is reloaded live with a config override, the traffic is
driven (closed-loop concurrencies or open-loop rates, optional priority mix), and
client latencies plus the server's batching statistics are recorded. The server's
config is loaded back at the end, also after Ctrl-C or an error. The winner is written
as a config.pbtxt; a report folder keeps every trial, plots and a checkpoint.

Examples:
  python -m tools.tune --model encoder --p99-ms 150
  python -m tools.tune --model encoder --p99-ms 100 --rate 40,80 --strategy grid --delays-us 0,2000,8000
  python -m tools.tune --model encoder --p99-ms 80 --objective mixed --priority-mix 1:0.2,2:0.8 --apply
  python -m tools.tune --model encoder --p99-ms 250 --strategy model-guided   # simulate all, measure the top 3 (docs/simulate.md)
  python -m tools.tune --model llm --slo ttft_p99=1s,tpot_p99=100ms --concurrency 8   # the LLM's scheduler (tools/tune/llm/)
"""

from __future__ import annotations

import itertools
import logging
import sys

from tools.cli.exit_status import run_reporting_errors
from tools.cli.logsetup import configure_logging
from tools.tune.settings import build_parser, check_arguments, settings_from_args
from tools.tune.sweep import run_tuning

log = logging.getLogger("tune")


def run(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--model=llm" in argv or any(a == "--model" and b == "llm" for a, b in itertools.pairwise(argv)):
        from tools.tune.llm.command import run as run_llm  # the LLM's scheduler knobs: tools/tune/llm/

        return run_llm(argv)
    parser = build_parser(__doc__)
    args = parser.parse_args(argv)
    try:
        check_arguments(args)
    except ValueError as exc:
        parser.error(str(exc))
    configure_logging(args)
    return run_reporting_errors(lambda: run_tuning(settings_from_args(args)), log)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
