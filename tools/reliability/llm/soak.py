"""`python -m tools.reliability.llm.soak`: a bounded soak of the `llm` model: it must stay up,
refuse cleanly and hold its memory steady under sustained mixed traffic.

A steady, sub-capacity rate of streaming requests through the three paths (gRPC streaming,
Triton's /generate_stream, the gateway's OpenAI streaming chat; tools/reliability/llm/traffic.py),
with clients that disconnect mid-stream, bad requests of several kinds, and, halfway, a burst
past both bounds (the gateway's `--llm-max-streams` and the model's `max_num_seqs + max_waiting`)
that must be refused fast. At the end it checks that every request had a terminal outcome of
the kind expected, that the resident memory of tritonserver, the Python stub and the gateway
levelled off (windowed, against a threshold), that every KV block is free and nothing runs or
waits, and that the model's finished counts by reason match what the clients saw (aborts are
the clients that left). Exit status 1 on any violation; JSON and Markdown under reports/soak-llm/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tools.cli.arguments import parse_settings
from tools.cli.logsetup import add_verbosity_flags
from tools.contract import LLM_MODEL
from tools.load.driver import run_until_complete
from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.ports import free_ports
from tools.reliability.llm.traffic import CANCELLED, OK, REJECTED, Outcome, Traffic
from tools.reliability.soak import memory, rss_mb
from tools.serve.gateway_process import GatewayProcess
from tools.serve.llm.engine import READY_TIMEOUT_S, add_llm_engine_argument, config_name_for
from tools.serve.local_triton import LocalTriton, ServerOptions
from tools.triton_client import TritonClient, fetch_metrics, metric_total

log = logging.getLogger("llm-soak")

# The scheduler the soak runs: small bounds, so a burst of a few dozen streams passes them (the
# committed 256 waiting would need a flood that crashed Triton 2.51's Python backend, docs/llm.md).
SOAK_KNOBS = {"max_num_seqs": "4", "max_waiting": "8", "kv_cache_bytes": str(64 * 2**20)}
REASONS = ("stop", "length", "abort", "timeout", "error")


@dataclass(frozen=True)
class SoakSettings:
    duration_s: float = 600.0
    rate: float = 0.5  # steady requests per second, well below what 4 running sequences serve here
    window_s: float = 30.0  # one memory sample and progress line per window
    max_tokens: int = 16  # of a good request; a disconnecting one asks twice as many and leaves within the first third
    deadline_s: float = 180.0  # a request with no terminal outcome by then is `hung`
    reject_within_s: float = 5.0  # an overload rejection slower than this is a violation
    memory_threshold_mb: float = 100.0  # growth of a process's resident level beyond this is a violation
    burst_extra: int = 8  # streams beyond each bound in the burst
    gateway_streams: int = 6  # the gateway's --llm-max-streams during the soak
    settle_s: float = 60.0  # how long the server may take to go idle and count everything after the load
    seed: int = 0


@dataclass(frozen=True)
class Targets:
    grpc_url: str
    http_url: str
    metrics_url: str
    gateway_url: str
    server_pid: int
    gateway_pid: int

    def memory(self) -> dict[str, float]:
        """Resident MB of tritonserver, each live Python stub, and the gateway."""
        return memory(self.server_pid) | {"gateway": round(rss_mb(self.gateway_pid), 1)}


@dataclass
class LlmSoakReport:
    settings: dict
    duration_s: float
    sent: int
    outcomes: dict[str, dict[str, int]]  # kind -> outcome -> count
    unexpected: list[str]  # one line per request with an outcome its kind does not allow
    rejection_s_max: float | None  # the slowest overload rejection
    bursts: dict[str, dict[str, int]]  # burst kind -> outcome -> count
    memory_windows: list[dict[str, float]]
    memory_growth_mb: dict[str, float]
    end_state: dict[str, float]  # kv_cache_usage_perc, running, waiting after the load
    server_finished: dict[str, int]  # the model's request_success by finished_reason during the soak
    client_finished: dict[str, int]  # what the clients saw: answered by finish reason, abort = cancelled by the client
    violations: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        """The readable report (also llm-soak.md)."""
        counts: Counter = Counter()
        for per_kind in self.outcomes.values():
            counts.update(per_kind)
        lines = [
            f"# LLM soak: {self.duration_s:.0f} s at {self.settings['rate']:g} req/s: {self.sent} requests: "
            + ("PASSED" if self.passed else "FAILED"),
            "",
            f"- outcomes: {', '.join(f'{name} {n}' for name, n in sorted(counts.items()))}",
            *[f"  - {kind}: {', '.join(f'{o} {n}' for o, n in sorted(per.items()))}" for kind, per in self.outcomes.items()],
            "- bursts: "
            + "; ".join(f"{kind}: " + ", ".join(f"{o} {n}" for o, n in sorted(per.items())) for kind, per in self.bursts.items()),
            f"- slowest overload rejection: {'-' if self.rejection_s_max is None else f'{self.rejection_s_max:.3f} s'} "
            f"(limit {self.settings['reject_within_s']:g} s)",
            f"- resident memory growth MB (median of the last 3 windows minus the first 3 under load; limit "
            f"{self.settings['memory_threshold_mb']:g}): " + ", ".join(f"{name} {mb:+.1f}" for name, mb in self.memory_growth_mb.items()),
            "- memory MB at start -> end: "
            + ", ".join(
                f"{name} {self.memory_windows[0].get(name, 0):.0f} -> {self.memory_windows[-1].get(name, 0):.0f}"
                for name in self.memory_windows[-1]
                if name != "t_s"
            ),
            f"- after the load: {', '.join(f'{name} {value:g}' for name, value in self.end_state.items())}",
            f"- finished by reason, server: {self.server_finished}; clients: {self.client_finished}",
            f"- violations: {len(self.violations)}",
            *[f"  - {violation}" for violation in self.violations],
            *[f"  - unexpected: {line}" for line in self.unexpected[:10]],
        ]
        return "\n".join(lines)


def finished_by_reason(metrics_url: str) -> dict[str, int]:
    samples = fetch_metrics(metrics_url)
    return {reason: int(metric_total(samples, "vllm:request_success", finished_reason=reason)) for reason in REASONS}


def load_state(metrics_url: str) -> dict[str, float]:
    samples = fetch_metrics(metrics_url)
    names = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting")
    return {name.removeprefix("vllm:"): metric_total(samples, name) for name in names}


def client_finished(outcomes: list[Outcome]) -> dict[str, int]:
    """What the model should have counted: each answer by its finish reason, each client that left as an abort."""
    counts = {reason: 0 for reason in REASONS}
    for outcome in outcomes:
        if outcome.outcome == OK and outcome.finish_reason in counts:
            counts[outcome.finish_reason] += 1
        elif outcome.outcome == CANCELLED:
            counts["abort"] += 1
    return counts


def growth(windows: list[dict[str, float]]) -> dict[str, float]:
    """Per process: the median level of the last three samples minus that of the first three
    taken under load (sample 0 is before any request: the model has not run yet)."""
    loaded = windows[1:] if len(windows) > 2 else windows
    names = [name for name in loaded[-1] if name != "t_s"]
    return {
        name: round(statistics.median(w.get(name, 0.0) for w in loaded[-3:]) - statistics.median(w.get(name, 0.0) for w in loaded[:3]), 1)
        for name in names
    }


async def drive(targets: Targets, settings: SoakSettings) -> tuple[list[Outcome], list[dict[str, float]], float]:
    """The steady load with its one burst halfway; memory sampled every window. Returns every
    request's outcome, the memory samples and the load's duration."""
    traffic = Traffic(targets.grpc_url, targets.http_url, targets.gateway_url, settings.max_tokens, settings.deadline_s, settings.seed)
    await traffic.open()
    windows = [{"t_s": 0.0, **targets.memory()}]
    tasks: list[asyncio.Task] = []
    try:
        index, steady, burst_sent, next_window = 0, 0, False, settings.window_s
        while (now := traffic.now()) < settings.duration_s:
            if not burst_sent and now >= settings.duration_s / 2:
                burst_sent = True
                grpc_burst = int(SOAK_KNOBS["max_num_seqs"]) + int(SOAK_KNOBS["max_waiting"]) + settings.burst_extra
                gateway_burst = settings.gateway_streams + settings.burst_extra
                # the gateway's first, so its own bound refuses before the model's queue fills
                for name, size in (("burst_openai_chat", gateway_burst), ("burst_grpc", grpc_burst)):
                    for _ in range(size):
                        tasks.append(asyncio.ensure_future(traffic.send(index, name)))
                        index += 1
                log.info("%6.0f s: burst sent (%d direct gRPC, %d through the gateway)", now, grpc_burst, gateway_burst)
            tasks.append(asyncio.ensure_future(traffic.send(index, traffic.pick())))
            index += 1
            if now >= next_window:
                windows.append({"t_s": round(now, 1), **targets.memory()})
                done = sum(task.done() for task in tasks)
                log.info("%6.0f s: %d sent, %d ended; memory %s", now, len(tasks), done, windows[-1])
                next_window += settings.window_s
            steady += 1
            await asyncio.sleep(max(0.0, steady / settings.rate - traffic.now()))  # a constant rate, not drifting with the loop's own time
        outcomes = list(await asyncio.gather(*tasks))
        duration = traffic.now()
        windows.append({"t_s": round(duration, 1), **targets.memory()})
        return outcomes, windows, duration
    finally:
        for task in tasks:
            task.cancel()
        await traffic.close()


def settle(metrics_url: str, expected: dict[str, int], before: dict[str, int], timeout_s: float) -> tuple[dict[str, float], dict[str, int]]:
    """Wait until the model is idle and has counted what the clients saw (or `timeout_s`); its
    final load state and finished counts during the soak."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = load_state(metrics_url)
        finished = {reason: count - before[reason] for reason, count in finished_by_reason(metrics_url).items()}
        idle = not any(state.values())
        if (idle and all(finished[r] >= expected[r] for r in REASONS)) or time.monotonic() > deadline:
            return state, finished
        time.sleep(0.5)


def run_llm_soak(targets: Targets, settings: SoakSettings) -> LlmSoakReport:
    """Drive the soak against a running Triton (serving `llm` with SOAK_KNOBS) and gateway, then check."""
    before = finished_by_reason(targets.metrics_url)
    outcomes, windows, duration = run_until_complete(drive(targets, settings))
    expected = client_finished(outcomes)
    end_state, server = settle(targets.metrics_url, expected, before, settings.settle_s)
    per_kind: dict[str, Counter] = {}
    for outcome in outcomes:
        per_kind.setdefault(outcome.kind, Counter())[outcome.outcome] += 1
    unexpected = [f"#{o.index} {o.kind}: {o.outcome} {o.message or o.finish_reason or ''}".strip() for o in outcomes if not o.expected]
    rejections = [o.latency_s for o in outcomes if o.outcome == REJECTED]
    memory_growth = growth(windows)
    violations = []
    if unexpected:
        violations.append(f"{len(unexpected)} request(s) ended with an outcome their kind does not allow (hung ones included)")
    for burst in ("burst_grpc", "burst_openai_chat"):
        if not per_kind.get(burst, Counter())[REJECTED]:
            violations.append(f"{burst}: the burst past the bound had no request rejected")
    if rejections and max(rejections) > settings.reject_within_s:
        violations.append(f"an overload rejection took {max(rejections):.2f} s (limit {settings.reject_within_s:g} s)")
    violations += [
        f"{name}'s resident memory grew {mb:+.1f} MB (limit {settings.memory_threshold_mb:g})"
        for name, mb in memory_growth.items()
        if mb > settings.memory_threshold_mb
    ]
    if any(end_state.values()):
        violations.append(f"the model was not idle with every KV block free after the load: {end_state}")
    violations += [
        f"finished '{reason}': the model counted {server[reason]}, the clients saw {expected[reason]}"
        for reason in REASONS
        if server[reason] != expected[reason]
    ]
    return LlmSoakReport(
        settings=asdict(settings),
        duration_s=round(duration, 1),
        sent=len(outcomes),
        outcomes={kind: dict(counts) for kind, counts in per_kind.items()},
        unexpected=unexpected,
        rejection_s_max=round(max(rejections), 3) if rejections else None,
        bursts={kind: dict(per_kind.get(kind, {})) for kind in ("burst_grpc", "burst_openai_chat")},
        memory_windows=windows,
        memory_growth_mb=memory_growth,
        end_state=end_state,
        server_finished=server,
        client_finished=expected,
        violations=violations,
    )


def write_report(report: LlmSoakReport, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    document = asdict(report) | {"passed": report.passed}
    (directory / "llm-soak.json").write_text(json.dumps(document, indent=1))
    (directory / "llm-soak.md").write_text(report.summary() + "\n")
    return directory / "llm-soak.json"


def soak_config(client: TritonClient):
    """The served `llm` config with SOAK_KNOBS (a config override; the committed file is untouched).
    On vLLM the KV pool stays as configured: vLLM refuses a pool smaller than one max_model_len."""
    committed = client.config(LLM_MODEL)
    config = type(committed)()
    config.CopyFrom(committed)
    vllm = "engine" in config.parameters and config.parameters["engine"].string_value == "vllm"
    for name, value in SOAK_KNOBS.items():
        if not (vllm and name == "kv_cache_bytes"):
            config.parameters[name].string_value = value
    return config


def build_parser() -> argparse.ArgumentParser:
    defaults = SoakSettings()
    parser = argparse.ArgumentParser(prog="python -m tools.reliability.llm.soak", description=__doc__)
    parser.add_argument("--duration", type=float, default=defaults.duration_s, help="seconds of load (default %(default)s)")
    parser.add_argument("--rate", type=float, default=defaults.rate, help="steady req/s, below capacity (default %(default)s)")
    parser.add_argument("--window", type=float, default=defaults.window_s, help="seconds per memory sample and progress line")
    parser.add_argument("--max-tokens", type=int, default=defaults.max_tokens, help="tokens a good request asks for")
    parser.add_argument("--memory-threshold-mb", type=float, default=defaults.memory_threshold_mb)
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "reports" / "soak-llm")
    add_llm_engine_argument(parser)
    add_verbosity_flags(parser)
    return parser


@dataclass(frozen=True)
class SoakCommand:
    """The command line: the soak's settings and where its report goes."""

    soak: SoakSettings
    output: Path
    llm_engine: str = "native"

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> SoakCommand:
        """Refuse out-of-range options before the server starts (ValueError names the option)."""
        for option, value in (
            ("--duration", args.duration),
            ("--rate", args.rate),
            ("--window", args.window),
            ("--max-tokens", args.max_tokens),
        ):
            if not 0 < value < math.inf:
                raise ValueError(f"{option} must be a number above 0, got {value:g}")
        soak = SoakSettings(
            duration_s=args.duration,
            rate=args.rate,
            window_s=args.window,
            max_tokens=args.max_tokens,
            memory_threshold_mb=args.memory_threshold_mb,
        )
        return cls(soak, args.output, args.llm_engine)


def run(argv: list[str] | None = None) -> int:
    command = parse_settings(build_parser(), argv, SoakCommand.from_cli_args)
    settings, output = command.soak, command.output
    output.mkdir(parents=True, exist_ok=True)
    http, grpc, metrics, gateway_port = free_ports(4)
    options = ServerOptions(
        http_port=http,
        grpc_port=grpc,
        metrics_port=metrics,
        exit_timeout_s=10,
        model_repository=MODEL_REPOSITORY,
        model_control_mode="explicit",
        load_models=(LLM_MODEL,),
        model_config_name=config_name_for(command.llm_engine),
    )
    with LocalTriton(options, log_path=output / "triton.log").start(READY_TIMEOUT_S[command.llm_engine]) as server:
        server.client.load(LLM_MODEL, soak_config(server.client))
        gateway = GatewayProcess(
            options.grpc_url,
            port=gateway_port,
            extra_args=("--llm-max-streams", str(settings.gateway_streams)),
            log_path=output / "gateway.log",
        )
        with gateway.start():  # live; its /health is the embedding model's, which this server does not load
            targets = Targets(options.grpc_url, options.http_url, options.metrics_url, gateway.url, server.pid, gateway.process.pid)
            log.info("soaking for %g s at %g req/s; a progress line every %g s", settings.duration_s, settings.rate, settings.window_s)
            report = run_llm_soak(targets, settings)
    path = write_report(report, output)
    print(report.summary())
    print(f"report: {path}")
    return 0 if report.passed else 1


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
