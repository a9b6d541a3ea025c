"""`python -m tools.bench.gateway` (`make bench-gateway`): the OpenAI gateway's cost, measured.

One run, one HTTP/JSON client (aiohttp, closed loop), the same texts for every target:
- **gateway**: `POST /v1/embeddings` on the gateway, which talks gRPC to Triton;
- **Triton HTTP/JSON**: `POST /v2/models/embed/infer` straight to the same Triton;
- **infinity-emb** (when installed in its own virtual environment, `--infinity-venv`):
  a dedicated embedding server users compare us with, on the same model folder, offline.

Levels are interleaved (for each concurrency, each target in turn), so drift on a shared
machine spreads over all targets instead of favouring one. Every text is unique (a
counter suffix), so Triton's response cache never answers. Every server this command
starts is stopped by its PID, also on Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys

from tools.bench.gateway.benchmark import measure
from tools.bench.gateway.report import render
from tools.bench.gateway.settings import GatewayBenchSettings
from tools.cli.arguments import parse_settings
from tools.cli.logsetup import add_verbosity_flags

log = logging.getLogger("bench.gateway")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.gateway", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    GatewayBenchSettings.add_cli_args(parser)
    add_verbosity_flags(parser)
    return parser


def run(argv: list[str] | None = None) -> int:
    settings = parse_settings(build_parser(), argv, GatewayBenchSettings.from_cli_args)

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        report = measure(settings)
    except KeyboardInterrupt:
        log.error("interrupted; every server this run started was stopped")
        return 130
    except (RuntimeError, OSError) as exc:
        log.error("%s", exc)
        return 1
    (settings.out / "report.json").write_text(json.dumps(report, indent=2))
    (settings.out / "report.md").write_text(render(report))
    print(render(report))
    log.info("wrote %s", settings.out / "report.md")
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
