"""`python -m tools.reliability.soak`: a bounded soak at a steady, sub-capacity rate.

Drives the load driver (tools/load) at a fixed rate with a mix of good requests (unique texts, plus repeats the cache
answers) and bad ones (invalid UTF-8 through the ensemble, an out-of-range token id at
the encoder, a wrong shape), each kind with its expected outcome. Per window it records
the latency of good requests and the resident memory of tritonserver and each backend
stub; at the end it reports memory growth, latency drift, every unexpected outcome, and
reconciles the client's counts with the server's statistics. Exit status 1 when any
request got the wrong outcome or none at all.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from tools.cli.arguments import parse_settings
from tools.cli.logsetup import add_verbosity_flags
from tools.load.driver import LoadDriver, Run, run_until_complete
from tools.load.mix import RequestMix
from tools.load.outcomes import OK
from tools.load.requests import Target, bytes_tensor, token_tensors
from tools.load.results import Results, format_ms
from tools.load.schedules import Constant, Phase
from tools.load.triton import TritonSender
from tools.paths import REPO_ROOT
from tools.ports import free_ports
from tools.serve.health_watch import stub_processes
from tools.serve.local_triton import LocalTriton, ServerOptions
from tools.triton_client.stats import ModelStats

log = logging.getLogger("soak")

# kind -> (share of requests, expected to succeed)
MIX = {"good": (0.80, True), "repeat": (0.08, True), "bad_utf8": (0.04, False), "bad_token": (0.04, False), "bad_shape": (0.04, False)}


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def memory(server_pid: int) -> dict[str, float]:
    """Resident MB of tritonserver and of each live stub, by model."""
    sizes = {"tritonserver": round(rss_mb(server_pid), 1)}
    for stub in stub_processes(server_pid):
        if stub.alive:
            sizes[f"stub:{stub.model}"] = round(rss_mb(stub.pid), 1)
    return sizes


@dataclass
class Window:
    t_s: float
    good_p50_ms: float | None  # None: no good request completed in the window
    good_p99_ms: float | None
    completed: int
    memory_mb: dict[str, float]

    def progress(self, sent: int, answered: int) -> str:
        memory = ", ".join(f"{name} {mb:.0f} MB" for name, mb in self.memory_mb.items())
        return (
            f"{self.t_s:6.0f} s: {sent} sent, {answered} answered; good requests in the window: {self.completed}, "
            f"p50 {format_ms(self.good_p50_ms)} ms, p99 {format_ms(self.good_p99_ms)} ms; memory {memory}"
        )


@dataclass
class SoakReport:
    rate: float
    duration_s: float
    sent: int
    answered: int
    outcomes: dict[str, dict[str, int]]  # kind -> {"ok": n, "error": n}
    unexpected: dict[str, int]
    unexpected_examples: list[str]
    memory_start_mb: dict[str, float]
    memory_end_mb: dict[str, float]
    latency_first_window: dict[str, float]
    latency_last_window: dict[str, float]
    server: dict[str, dict[str, int]]
    windows: list[Window] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.sent == self.answered and not self.unexpected

    def summary(self) -> str:
        """The readable report (also soak.md)."""
        first, last = self.latency_first_window, self.latency_last_window
        outcomes = ", ".join(f"{kind} {counts['ok']} ok / {counts['error']} failed" for kind, counts in self.outcomes.items())
        unexpected = ", ".join(f"{kind} {count}" for kind, count in self.unexpected.items()) or "none"
        memory = ", ".join(
            f"{name} {start:.1f} -> {format_ms(self.memory_end_mb.get(name))}"
            + (f" ({self.memory_end_mb[name] - start:+.1f})" if name in self.memory_end_mb else " (gone)")
            for name, start in self.memory_start_mb.items()
        )
        server = ", ".join(
            f"{model} {d['success']} ok / {d['failures']} failed, {d['cache_hits']} cache hits" for model, d in self.server.items()
        )
        lines = [
            f"soak {self.duration_s:.0f} s at {self.rate:g} req/s: {self.sent} sent, {self.answered} answered: "
            + ("PASSED" if self.passed else "FAILED"),
            f"  outcomes: {outcomes} (good and repeat should succeed, bad_* fail)",
            f"  unexpected outcomes: {unexpected}",
            *[f"    e.g. {example}" for example in self.unexpected_examples],
            f"  good-request latency, first -> last window: p50 {format_ms(first['p50_ms'])} -> {format_ms(last['p50_ms'])} ms, "
            f"p99 {format_ms(first['p99_ms'])} -> {format_ms(last['p99_ms'])} ms",
            f"  resident memory MB, start -> end: {memory}",
            f"  server statistics: {server}",
        ]
        return "\n".join(lines)


def soak_targets() -> dict[str, Target]:
    """One request factory per kind of the mix; texts numbered so the cache never answers a good one."""
    counter = itertools.count()

    def texts(make_array) -> Callable[[object, int], list]:
        return lambda module, index: [bytes_tensor(module, make_array())]

    def target(model: str, make_inputs) -> Target:
        return Target(model, (), make_inputs)

    return {
        "good": target("embed", texts(lambda: np.array([[f"soak text number {next(counter)}".encode()]], dtype=np.object_))),
        "repeat": target("embed", texts(lambda: np.array([[b"the same text again"]], dtype=np.object_))),
        "bad_utf8": target("embed", texts(lambda: np.array([[b"broken \xff\xfe text"]], dtype=np.object_))),
        "bad_token": target("encoder", lambda module, index: token_tensors(module, np.array([[101, 10_000_000, 102]], dtype=np.int64))),
        "bad_shape": target("embed", texts(lambda: np.array([b"no batch axis"], dtype=np.object_))),
    }


class _Soak:
    """The engine at a constant rate with the MIX of kinds, sampled every window."""

    def __init__(self, grpc_url: str, rate: float, duration_s: float, window_s: float, server_pid: int, seed: int) -> None:
        self.window_s, self.server_pid = window_s, server_pid
        mix = RequestMix(kinds={kind: share for kind, (share, _) in MIX.items()}, seed=seed)
        sender = TritonSender(grpc_url, soak_targets())
        self.engine = LoadDriver(sender, [Phase(Constant(rate), duration_s)], mix, deadline_s=60.0, seed=seed)
        self.windows: list[Window] = []

    def window(self, start: float, end: float) -> Window:
        good = [r for r in self.engine.records if r.kind == "good" and start <= r.done_s < end]
        summary = Results.of(good, end - start).latency
        p50, p99 = (None if v is None else round(v, 2) for v in (summary.p50_ms, summary.p99_ms))
        window = Window(round(end, 1), p50, p99, summary.count, memory(self.server_pid))
        log.info("%s", window.progress(self.engine.result.sent, len(self.engine.records)))
        return window

    async def run(self) -> Run:
        self.windows.append(Window(0.0, None, None, 0, memory(self.server_pid)))
        driving = asyncio.create_task(self.engine.run())
        await self.engine.ready.wait()
        start = 0.0
        while not driving.done():
            await asyncio.wait([driving], timeout=max(0.0, start + self.window_s - self.engine.now()))
            if not driving.done():
                self.windows.append(self.window(start, start + self.window_s))
                start += self.window_s
        run = await driving
        self.windows.append(self.window(start, run.seconds))
        return run


def run_soak(server: LocalTriton, rate: float, duration_s: float, window_s: float, seed: int = 0) -> SoakReport:
    """Drive the soak against a running local server (its PID is needed for memory)."""
    options = server.options
    before = {m: ModelStats.settled(options.http_url, m) for m in ("embed", "encoder")}
    soak = _Soak(options.grpc_url, rate, duration_s, window_s, server.pid, seed)
    run = run_until_complete(soak.run())
    windows = soak.windows
    after = {m: ModelStats.settled(options.http_url, m) - before[m] for m in before}
    outcomes: dict[str, dict[str, int]] = {}
    unexpected: dict[str, int] = {}
    examples: list[str] = []
    for record in run.records:
        ok = record.outcome == OK
        outcomes.setdefault(record.kind, {"ok": 0, "error": 0})["ok" if ok else "error"] += 1
        if ok != MIX[record.kind][1]:
            unexpected[record.kind] = unexpected.get(record.kind, 0) + 1
            if len(examples) < 5:
                examples.append(f"{record.kind}: {record.message or 'succeeded'}")
    measured = [w for w in windows[1:] if w.completed]
    first, last = (measured[0], measured[-1]) if measured else (windows[0], windows[-1])
    return SoakReport(
        rate=rate,
        duration_s=duration_s,
        sent=run.sent,
        answered=len(run.records),
        outcomes=outcomes,
        unexpected=unexpected,
        unexpected_examples=examples,
        memory_start_mb=windows[0].memory_mb,
        memory_end_mb=windows[-1].memory_mb,
        latency_first_window={"p50_ms": first.good_p50_ms, "p99_ms": first.good_p99_ms},
        latency_last_window={"p50_ms": last.good_p50_ms, "p99_ms": last.good_p99_ms},
        server={m: {"success": d.requests, "failures": d.failures, "cache_hits": d.cache_hits} for m, d in after.items()},
        windows=windows,
    )


def write_report(report: SoakReport, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    document = asdict(report) | {"passed": report.passed, "summary": report.summary()}
    (directory / "soak.json").write_text(json.dumps(document, indent=1))
    (directory / "soak.md").write_text(report.summary() + "\n")
    return directory / "soak.json"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.reliability.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=20.0, help="req/s, well below capacity (default %(default)s)")
    parser.add_argument("--window", type=float, default=30.0, help="seconds per latency/memory sample and progress line")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "reports" / "soak")
    parser.add_argument(
        "--cache-mb",
        type=int,
        default=64,
        help="response cache size (default %(default)s, as `make serve`); a small one fills within minutes, "
        "which shows whether memory levels off once it is full",
    )
    add_verbosity_flags(parser)
    return parser


@dataclass(frozen=True)
class SoakSettings:
    minutes: float
    rate: float  # req/s, well below capacity
    window_s: float  # per latency/memory sample and progress line
    output: Path
    cache_mb: int  # response cache size

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> SoakSettings:
        """Refuse out-of-range options before the server starts (ValueError names the option)."""
        for option, value in (("--minutes", args.minutes), ("--rate", args.rate), ("--window", args.window)):
            if not 0 < value < math.inf:
                raise ValueError(f"{option} must be a number above 0, got {value:g}")
        if args.cache_mb < 1:
            raise ValueError(f"--cache-mb must be at least 1 (the response cache is part of what a soak watches), got {args.cache_mb}")
        return cls(args.minutes, args.rate, args.window, args.output, args.cache_mb)


def run(argv: list[str] | None = None) -> int:
    settings = parse_settings(build_parser(), argv, SoakSettings.from_cli_args)
    http, grpc, metrics = free_ports(3)
    settings.output.mkdir(parents=True, exist_ok=True)
    options = ServerOptions(
        http_port=http, grpc_port=grpc, metrics_port=metrics, exit_timeout_s=10, cache_size_bytes=settings.cache_mb * 1024 * 1024
    )
    with LocalTriton(options, log_path=settings.output / "triton.log").start() as server:
        log.info("soaking for %g min at %g req/s; a progress line every %g s", settings.minutes, settings.rate, settings.window_s)
        report = run_soak(server, settings.rate, settings.minutes * 60.0, settings.window_s)
    path = write_report(report, settings.output)
    print(report.summary())
    print(f"report: {path}")
    if not report.passed:
        log.error(
            "soak failed: %d request(s) got an unexpected outcome, %d of %d answered (details above)",
            sum(report.unexpected.values()),
            report.answered,
            report.sent,
        )
        return 1
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
