"""`python -m loadtest.run` (behind `make loadtest`): a bounded locust run against Triton,
with reports, Triton's batching statistics and an SLO verdict (exit 1 when missed).

Starts a local Triton on the given ports when none answers there, and stops it after.
Extra locust arguments go after `--`, e.g. `-- --loglevel DEBUG`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from loadtest.options import LoadValues, add_load_options
from loadtest.server_stats import MODELS, PipelineCounters, format_deltas
from loadtest.verdict import ClassSLO, add_slo_arguments, evaluate, format_verdict
from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.paths import REPO_ROOT
from tools.ports import free_ports, port_in_use
from tools.serve.interrupts import raise_interrupted
from tools.serve.llm.engine import READY_TIMEOUT_S, add_llm_engine_argument, config_name_for
from tools.serve.local_triton import LocalTriton, ServerOptions, TritonStartError
from tools.triton_client import TritonClient

log = logging.getLogger("loadtest")

LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
LLM_LOCUSTFILE = Path(__file__).resolve().parent / "llm" / "locustfile.py"
# How long a distributed run's master waits for its worker processes before failing:
# a worker that never reports ready must end the run with an error, not hang it.
WORKERS_MAX_WAIT_S = 120
USERS_BY_PROTOCOL = {
    "http": ("InteractiveHttpUser", "BulkHttpUser"),
    "grpc": ("InteractiveGrpcUser", "BulkGrpcUser"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m loadtest.run", description=__doc__)
    run = parser.add_argument_group("run")
    run.add_argument("--users", type=int, default=8, help="users (the peak, for step/burst/wave shapes) (default: %(default)s)")
    run.add_argument("--spawn-rate", type=float, default=None, help="users started per second (default: all at once)")
    run.add_argument("--run-time", type=float, default=60.0, help="seconds (default: %(default)s)")
    run.add_argument(
        "--workload",
        choices=("embed", "llm"),
        default="embed",
        help="embed: the embedding users (interactive/bulk); llm: streaming LLM users (TTFT/ITL/e2e) (default: %(default)s)",
    )
    run.add_argument("--protocol", choices=("both", "http", "grpc"), default="both", help="embed workload (default: %(default)s)")
    run.add_argument("--report-dir", type=Path, default=None, help="default: reports/loadtest/<time>-<shape>")
    run.add_argument("--ui", action="store_true", help="locust's web UI instead of headless (Ctrl-C ends it, then the verdict)")
    run.add_argument("--web-port", type=int, default=8089, help="web UI port with --ui (default: %(default)s)")
    run.add_argument("--no-start", action="store_true", help="fail instead of starting Triton when none answers")
    add_llm_engine_argument(run)
    add_load_options(parser)
    add_slo_arguments(parser)
    add_verbosity_flags(parser)
    parser.add_argument("locust_args", nargs=argparse.REMAINDER, help="after `--`: passed to locust unchanged")
    return parser


@dataclass(frozen=True)
class RunSettings:
    """build_parser()'s options as typed values."""

    users: int
    spawn_rate: float | None  # users started per second; None: all at once
    run_time_s: float
    workload: str  # embed or llm
    protocol: str  # both, http or grpc (embed workload)
    report_dir: Path
    ui: bool
    web_port: int
    start: bool  # start a Triton when none answers
    llm_engine: str  # the engine of `llm` on a server this run starts (tools/serve/llm/engine.py)
    load: LoadValues  # forwarded to locust
    slos: dict[str, ClassSLO]
    locust_args: list[str]  # passed to locust unchanged

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> RunSettings:
        if args.users < 1 or args.run_time <= 0:
            raise ValueError("--users must be at least 1 and --run-time positive")
        load = LoadValues.from_cli_args(args)
        report_dir = args.report_dir or REPO_ROOT / "reports" / "loadtest" / f"{time.strftime('%Y%m%d-%H%M%S')}-{load['--shape']}"
        return cls(
            users=args.users,
            spawn_rate=args.spawn_rate,
            run_time_s=args.run_time,
            workload=args.workload,
            protocol=args.protocol,
            report_dir=report_dir,
            ui=args.ui,
            web_port=args.web_port,
            start=not args.no_start,
            llm_engine=args.llm_engine,
            load=load,
            slos=ClassSLO.per_class_from_cli_args(args),
            locust_args=args.locust_args[1:] if args.locust_args[:1] == ["--"] else args.locust_args,
        )

    @property
    def triton_http_url(self) -> str:
        return str(self.load["--triton-http-url"])

    @property
    def triton_grpc_url(self) -> str:
        return str(self.load["--triton-grpc-url"])


def _host_port(url: str) -> tuple[str, int]:
    host, _, port = url.rpartition(":")
    return host, int(port)


@contextlib.contextmanager
def triton_for(http_url: str, grpc_url: str, report_dir: Path, start: bool = True, llm_engine: str = "native") -> Iterator[None]:
    """Use the server that answers at `http_url`, or (unless `start` is False) start one on
    those ports, `llm` on `llm_engine`."""
    if TritonClient(http_url).server_ready():
        log.info("using the Triton server at %s", http_url)
        yield
        return
    if not start:
        raise TritonStartError(f"no Triton answers at {http_url} (and --no-start was given)")
    host, http_port = _host_port(http_url)
    grpc_host, grpc_port = _host_port(grpc_url)
    if grpc_host != host:
        raise TritonStartError("to start a local server, the HTTP and gRPC URLs must name the same host")
    metrics_port = ServerOptions().metrics_port
    if port_in_use(host, metrics_port):
        metrics_port = free_ports(1, host)[0]
    options = ServerOptions(
        host=host,
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        exit_timeout_s=5,
        model_config_name=config_name_for(llm_engine),
    )
    log.info("no Triton at %s; starting one (log: %s)", http_url, report_dir / "triton.log")
    with LocalTriton(options, log_path=report_dir / "triton.log").start(READY_TIMEOUT_S[llm_engine]):
        yield


def user_classes(settings: RunSettings) -> list[str]:
    if settings.workload == "llm":
        return ["LlmStreamUser"]
    weights = {"Interactive": settings.load["--interactive-weight"], "Bulk": settings.load["--bulk-weight"]}
    users = [name for protocol in ("http", "grpc") if settings.protocol in (protocol, "both") for name in USERS_BY_PROTOCOL[protocol]]
    return [name for name in users if weights["Interactive" if name.startswith("Interactive") else "Bulk"] > 0]


def locust_command(settings: RunSettings, csv_prefix: Path, html: Path) -> list[str]:
    users = user_classes(settings)
    locustfile = LLM_LOCUSTFILE if settings.workload == "llm" else LOCUSTFILE
    command = [sys.executable, "-m", "locust", "-f", str(locustfile.relative_to(REPO_ROOT))]
    command += ["--users", str(settings.users), "--spawn-rate", str(settings.spawn_rate or settings.users)]
    command += ["--csv", str(csv_prefix), "--html", str(html), "--exit-code-on-error", "0"]
    if settings.ui:
        command += ["--web-host", "127.0.0.1", "--web-port", str(settings.web_port)]
    else:
        command += ["--headless", "--only-summary", "--run-time", f"{settings.run_time_s:g}s"]
    command += settings.load.locust_arguments()
    extra = settings.locust_args
    return command + distributed_arguments(extra) + extra + users


def distributed_arguments(locust_args: list[str]) -> list[str]:
    """With worker processes (`--processes N`), the master listens on a free loopback port
    of its own. Locust's default is port 5557 on every interface: two runs on one machine
    then shared one master (the second run's workers joined the first run, the second master
    failed to bind, its workers were orphaned), and the port was open beyond the host."""
    if not any(arg == "--processes" or arg.startswith("--processes=") for arg in locust_args):
        return []
    (port,) = free_ports(1)
    return [
        "--master-bind-host",
        "127.0.0.1",
        "--master-bind-port",
        str(port),
        "--master-host",
        "127.0.0.1",
        "--master-port",
        str(port),
        "--expect-workers-max-wait",
        str(WORKERS_MAX_WAIT_S),
    ]


def run_locust(command: list[str]) -> int:
    """Run locust to its end. Ctrl-C (SIGINT) is passed on, so locust ends its run and
    still writes its reports; any other way out (SIGTERM, an error) ends locust at once."""
    log.info("running %s", " ".join(command))
    # Its own session: a terminal's Ctrl-C reaches it once, through us, and its workers
    # (--processes) go with it as one group.
    process = subprocess.Popen(command, cwd=REPO_ROOT, start_new_session=True)

    def forward(signum: int, _frame: object) -> None:
        log.warning("%s: ending the locust run; the verdict follows", signal.Signals(signum).name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)

    previous = {signal.SIGINT: signal.signal(signal.SIGINT, forward), signal.SIGTERM: signal.signal(signal.SIGTERM, raise_interrupted)}
    try:
        return process.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args)
    try:
        settings = RunSettings.from_cli_args(args)
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    report_dir, slos = settings.report_dir, settings.slos
    report_dir.mkdir(parents=True, exist_ok=True)
    csv_prefix, html = report_dir / "locust", report_dir / "report.html"
    try:
        with triton_for(settings.triton_http_url, settings.triton_grpc_url, report_dir, settings.start, settings.llm_engine):
            # The statistics table is the embedding pipeline's; the LLM reports through its
            # own metrics (`make metrics`, the Grafana LLM dashboard).
            models = () if settings.workload == "llm" else MODELS
            before = PipelineCounters.take(settings.triton_http_url, models)
            code = run_locust(locust_command(settings, csv_prefix, html))
            deltas = PipelineCounters.take(settings.triton_http_url, models) - before
    except (TritonStartError, OSError) as exc:
        log.error("%s", exc)
        return 2
    if code != 0:
        log.error("locust exited with status %s", code)
        return 2
    try:
        verdict = evaluate(csv_prefix, slos)
    except (FileNotFoundError, KeyError, ValueError) as exc:
        log.error("cannot judge the run: %s", exc)
        return 2
    summary = format_verdict(verdict, slos) if not deltas else f"{format_deltas(deltas)}\n\n{format_verdict(verdict, slos)}"
    (report_dir / "verdict.txt").write_text(summary + "\n")
    print(summary)
    print(f"reports: {report_dir}/ (report.html, locust_*.csv, verdict.txt)")
    return 0 if verdict.passed else 1


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
