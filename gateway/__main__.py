"""`python -m gateway`: serve OpenAI's embeddings, completions and chat API in front of a running Triton.

    python -m gateway --triton-url 127.0.0.1:8001 --port 8080
    curl localhost:8080/v1/embeddings -H 'Content-Type: application/json' \
         -d '{"model": "embed", "input": ["Hello world"]}'

`make serve` starts it beside Triton (see tools.serve.gateway_process); alone, it waits for Triton:
`/health` answers 503 until Triton's model is ready.
"""

from __future__ import annotations

import argparse
import logging
import sys

from gateway.settings import GatewaySettings, SettingsError
from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.ports import port_in_use

log = logging.getLogger("gateway")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gateway", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    GatewaySettings.add_cli_args(parser)
    parser.add_argument("--access-log", action="store_true", help="log every request (uvicorn's access log)")
    add_verbosity_flags(parser)
    return parser


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args)
    try:
        settings = GatewaySettings.from_cli_args(args)
        if port_in_use(settings.host, settings.port):
            raise SettingsError(f"port {settings.port} on {settings.host} is already in use; choose another with --port")
    except (SettingsError, OSError) as exc:
        log.error("%s", exc)
        return 2
    import uvicorn

    from gateway.app import create_app

    if settings.api_keys:
        log.info("API keys required on /v1 (%d configured)", len(settings.api_keys))
    log.info("OpenAI-compatible API on http://%s:%d/v1 (embeddings: model %r)", settings.host, settings.port, settings.model_name)
    if settings.llm_model:
        log.info("completions and chat completions: model %r (Triton's %r)", settings.llm_name, settings.llm_model)
    level = "debug" if args.verbose else "warning" if args.quiet else "info"
    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=level,
        access_log=args.access_log,
        timeout_graceful_shutdown=10,
    )
    server = uvicorn.Server(config)
    server.run()
    return 0 if server.started else 1


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
