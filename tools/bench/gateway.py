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
import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
import numpy as np

from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.load.driver import Prepared, drive
from tools.load.mix import Request
from tools.load.outcomes import OK
from tools.load.requests import SAMPLE_TEXTS
from tools.load.schedules import ClosedLoop, Phase
from tools.machine import cpu_description
from tools.paths import BUILD_DIR, REPO_ROOT
from tools.ports import free_ports
from tools.serve.gateway_process import GatewayProcess
from tools.serve.process_group import stop_process_group
from tools.serve.server_session import triton_endpoints
from tools.triton_client.readiness import wait_for_http_ok

log = logging.getLogger("bench.gateway")

INFINITY_VENV = BUILD_DIR / "infinity-venv"
INFINITY_VERSION = "0.0.78"


@dataclass(frozen=True)
class EmbeddingEndpoint:
    name: str
    url: str
    body: Callable[[list[str]], dict]
    vectors: Callable[[dict], np.ndarray]  # [n, d] from a decoded answer


def openai_body(texts: list[str]) -> dict:
    return {"model": "embed", "input": texts}


def openai_vectors(answer: dict) -> np.ndarray:
    return np.array([item["embedding"] for item in sorted(answer["data"], key=lambda item: item["index"])], dtype=np.float32)


def gateway_target(base: str) -> EmbeddingEndpoint:
    return EmbeddingEndpoint("gateway (OpenAI API -> gRPC)", f"{base}/v1/embeddings", openai_body, openai_vectors)


def triton_target(http_url: str) -> EmbeddingEndpoint:
    def body(texts: list[str]) -> dict:
        return {"inputs": [{"name": "TEXT", "shape": [len(texts), 1], "datatype": "BYTES", "data": texts}]}

    def vectors(answer: dict) -> np.ndarray:
        output = answer["outputs"][0]
        return np.array(output["data"], dtype=np.float32).reshape(output["shape"])

    return EmbeddingEndpoint("Triton HTTP/JSON", f"http://{http_url}/v2/models/embed/infer", body, vectors)


def infinity_target(base: str) -> EmbeddingEndpoint:
    return EmbeddingEndpoint(f"infinity-emb {INFINITY_VERSION}", f"{base}/embeddings", openai_body, openai_vectors)


@dataclass
class Row:
    target: str
    concurrency: int
    requests: int
    errors: int
    seconds: float
    rps: float
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None = None  # a stall shows here first (reports before it have none)


class Texts:
    """The same mixed English/Chinese texts for every target, each unique (no cache hits)."""

    def __init__(self, per_request: int) -> None:
        self.per_request = per_request
        self.counter = 0
        self.nonce = f"{os.getpid()}-{int(time.time())}"

    def next(self) -> list[str]:
        texts = []
        for _ in range(self.per_request):
            self.counter += 1
            texts.append(f"{SAMPLE_TEXTS[self.counter % len(SAMPLE_TEXTS)]} #{self.nonce}-{self.counter}")
        return texts


async def fetch_vectors(target: EmbeddingEndpoint, texts: list[str]) -> np.ndarray:
    async with aiohttp.ClientSession() as session, session.post(target.url, json=target.body(texts)) as response:
        return target.vectors(await response.json(content_type=None))


def parity(targets: list[EmbeddingEndpoint]) -> dict[str, float]:
    """Min cosine of each target's embeddings to the first target's, on the sample texts:
    a comparison of speed only means something between servers that compute the same thing."""
    texts = list(SAMPLE_TEXTS)
    reference = asyncio.run(fetch_vectors(targets[0], texts))
    reference /= np.linalg.norm(reference, axis=1, keepdims=True)
    result = {}
    for target in targets:
        vectors = asyncio.run(fetch_vectors(target, texts))
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        result[target.name] = round(float(np.min(np.sum(vectors * reference, axis=1))), 6)
    return result


class AnswerError(Exception):
    """An answer that is not one embedding per text."""


class HttpSender:
    """The load driver's Sender for an embedding endpoint over HTTP/JSON: the client decodes
    every answer and checks it holds one embedding per text (a wrong answer is an error)."""

    def __init__(self, target: EmbeddingEndpoint, texts: Texts, connections: int) -> None:
        self.target, self.texts, self.connections = target, texts, connections
        self.session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        connector = aiohttp.TCPConnector(limit=self.connections)
        self.session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60))

    async def close(self) -> None:
        await self.session.close()

    def prepare(self, request: Request) -> Prepared:
        batch = self.texts.next()
        return Prepared(request, self.target.name, (batch, self.target.body(batch)), rows=len(batch))

    async def send(self, prepared: Prepared) -> None:
        batch, body = prepared.payload
        async with self.session.post(self.target.url, json=body) as response:
            answer = await response.json(content_type=None)
            if response.status != 200 or len(self.target.vectors(answer)) != len(batch):
                raise AnswerError(f"HTTP {response.status}: not one embedding per text")


def closed_loop(target: EmbeddingEndpoint, concurrency: int, texts: Texts, warmup_s: float, seconds: float) -> Row:
    """`concurrency` clients on the load driver; the warm-up is not counted."""
    run = drive(HttpSender(target, texts, concurrency), [Phase(ClosedLoop(concurrency), warmup_s + seconds)], deadline_s=60.0)
    results = run.results(warmup_s, warmup_s + seconds)
    ok = results.outcomes.get(OK, 0)
    latency = results.latency
    return Row(
        target.name, concurrency, ok, results.failed, seconds, results.throughput_rps, latency.p50_ms, latency.p99_ms, latency.max_ms
    )


# ---- servers --------------------------------------------------------------------------


def model_folder() -> Path:
    from export.source_model import default_model_dir

    return Path(default_model_dir())


EXPORT_ONNX = """
import sys
from optimum.exporters.onnx import main_export
main_export(sys.argv[1], output=sys.argv[2], task="feature-extraction", no_post_process=True)
"""


def infinity_model_folder(venv: Path, engine: str) -> Path:
    """The model folder for infinity. Its ONNX engine (optimum) needs a plain ONNX export
    in the folder (hidden states out; our model.onnx pools inside the graph), so it gets a
    copy of the folder, files linked, plus `model.onnx` exported once by optimum in
    infinity's own environment (at the top: optimum matches the bare file name). The torch engine reads the folder as it is."""
    source = model_folder()
    if engine != "optimum":
        return source
    folder = BUILD_DIR / "infinity-model"
    if (folder / "model.onnx").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if not (folder / item.name).exists():
            (folder / item.name).symlink_to(item)
    log.info("exporting the model to ONNX for infinity's optimum engine (once, into %s)", folder)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-c", EXPORT_ONNX, str(source), str(folder / "onnx")], env=env, capture_output=True, text=True
    )
    if result.returncode != 0 or not (folder / "onnx" / "model.onnx").is_file():
        raise RuntimeError(f"optimum's ONNX export for infinity failed: {(result.stderr.strip().splitlines() or ['?'])[-1]}")
    (folder / "onnx" / "model.onnx").rename(folder / "model.onnx")
    return folder


class InfinityServer:
    """`infinity_emb v2` from its own virtual environment, serving the model offline."""

    def __init__(self, venv: Path, engine: str, log_path: Path) -> None:
        self.binary = venv / "bin" / "infinity_emb"
        self.engine = engine
        self.log_path = log_path
        (self.port,) = free_ports(1)
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float) -> str | None:
        """None when ready, else why not (the row is then left out and the report says so)."""
        if not self.binary.is_file():
            venv = INFINITY_VENV.relative_to(REPO_ROOT)
            return f"not installed ({self.binary} missing; `make infinity-venv` makes {venv})"
        try:
            folder = infinity_model_folder(self.binary.parent.parent, self.engine)
        except RuntimeError as exc:
            return str(exc)
        command = [
            str(self.binary),
            "v2",
            "--model-id",
            ".",
            "--served-model-name",
            "embed",
            "--engine",
            self.engine,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--device",
            "cpu",
            "--log-level",
            "warning",
            "--pooling-method",
            "mean",  # the model's own (1_Pooling); infinity's optimum engine assumes CLS otherwise
        ]
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", INFINITY_ANONYMOUS_USAGE_STATS="0", DO_NOT_TRACK="1")
        log.info("starting infinity-emb (%s engine) on port %d (log: %s)", self.engine, self.port, self.log_path)
        with open(self.log_path, "wb") as output:
            # From inside the folder: infinity lists a local folder's files with absolute paths
            # that optimum then fails to find; "." yields the relative paths it expects.
            self.process = subprocess.Popen(command, cwd=folder, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        if wait_for_http_ok(f"{self.url}/health", timeout_s, self.process, interval_s=0.5):
            return None
        tail = self.log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        self.stop()
        return f"did not start within {timeout_s:.0f} s ({tail[0][:200]})"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            stop_process_group(process, ((signal.SIGTERM, 15.0),), "infinity-emb")


# ---- the report -----------------------------------------------------------------------


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def ratio(ours: float | None, theirs: float | None) -> str:
    return f"x{ours / theirs:.2f}" if ours is not None and theirs else "-"


def ratio_lines(rows: list[Row], names: list[str], levels: list[int]) -> list[str]:
    """The first target (the gateway) against each other one, level by level: throughput, and
    p99 (at one connection a stall in the gateway shows in p99 long before it shows in req/s)."""
    by = {(row.target, row.concurrency): row for row in rows}
    lines = []
    for other in names[1:]:
        pairs = [(level, by.get((names[0], level)), by.get((other, level))) for level in levels]
        rps = [f"{ratio(ours.rps, theirs.rps) if ours and theirs else '-'} at {level}" for level, ours, theirs in pairs]
        p99 = [f"{ratio(ours.p99_ms, theirs.p99_ms) if ours and theirs else '-'} at {level}" for level, ours, theirs in pairs]
        lines.append(f"- {names[0]} / {other}, req/s: " + ", ".join(rps))
        lines.append(f"- {names[0]} / {other}, p99: " + ", ".join(p99))
    return lines


def render(report: dict) -> str:
    rows = [Row(**row) for row in report["rows"]]
    cpu = report["cpu"]
    lines = [
        "# Gateway benchmark",
        "",
        f"`python -m tools.bench.gateway` on {report['date']}: {cpu['model']}",
        f"({cpu['cores']} cores; {', '.join(cpu['flags']) or 'no AVX'}),",
        f"load average {report['load_before']} before and {report['load_after']} after. One run; closed loop over HTTP/JSON with",
        f"one aiohttp client sharing the machine with the servers; {report['texts_per_request']} unique mixed text(s) per request;",
        f"{report['warmup_s']:g} s warm-up and {report['seconds']:g} s measured per row; targets interleaved per level.",
        "",
        "| target | concurrency | req/s | p50 ms | p99 ms | max ms | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in sorted(rows, key=lambda r: (report["targets"].index(r.target), r.concurrency)):
        latency = " | ".join(fmt(value) for value in (row.p50_ms, row.p99_ms, row.max_ms))
        lines.append(f"| {row.target} | {row.concurrency} | {row.rps:.1f} | {latency} | {row.errors} |")
    lines += ["", *ratio_lines(rows, report["targets"], report["concurrency"])]
    cosines = ", ".join(f"{name} {value:.6f}" for name, value in report["min_cosine_to_first"].items())
    lines.append(f"- same embeddings: min cosine to the first target's on the sample texts: {cosines}")
    for name, why in report["left_out"].items():
        lines.append(f"- {name}: left out, {why}")
    return "\n".join(lines) + "\n"


# ---- the command ----------------------------------------------------------------------


def parse_levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, not {text!r}") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError("concurrency levels must be at least 1")
    return levels


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.gateway", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=parse_levels, default=[1, 16, 64], help="closed-loop levels (default 1,16,64)")
    parser.add_argument("--seconds", type=float, default=6.0, help="measured seconds per target and level")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds sent before measuring, per target and level")
    parser.add_argument("--texts-per-request", type=int, default=1)
    parser.add_argument("--infinity-venv", type=Path, default=INFINITY_VENV, help="virtual environment with infinity-emb (its own)")
    parser.add_argument("--infinity-engine", default="optimum", help="infinity's engine: optimum (ONNX Runtime) or torch")
    parser.add_argument("--no-infinity", action="store_true", help="leave infinity-emb out")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "reports" / "bench-gateway")
    add_verbosity_flags(parser)
    return parser


def validate(args: argparse.Namespace) -> None:
    if args.seconds <= 0 or args.warmup < 0:
        raise ValueError("--seconds must be positive and --warmup not negative")
    if args.texts_per_request < 1:
        raise ValueError("--texts-per-request must be at least 1")


def measure(args: argparse.Namespace) -> dict:
    args.out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    left_out: dict[str, str] = {}
    with triton_endpoints(None) as endpoints:
        gateway = GatewayProcess(endpoints.grpc_url, port=free_ports(1)[0], log_path=args.out / "gateway.log").start()
        infinity = None if args.no_infinity else InfinityServer(args.infinity_venv, args.infinity_engine, args.out / "infinity.log")
        try:
            if not gateway.wait_ready(60):
                raise RuntimeError(f"the gateway never saw Triton ready{gateway.log_tail()}")
            targets = [gateway_target(gateway.url), triton_target(endpoints.http_url)]
            if infinity is not None:
                problem = infinity.start(timeout_s=300)
                if problem:
                    left_out[infinity_target("").name] = problem
                    log.warning("infinity-emb left out: %s", problem)
                else:
                    targets.append(infinity_target(infinity.url))
            cosines = parity(targets)
            log.info("min cosine to the gateway's embeddings: %s", cosines)
            texts = Texts(args.texts_per_request)
            rows = []
            for level in args.concurrency:
                order = targets[level % len(targets) :] + targets[: level % len(targets)]  # who goes first varies
                for target in order:
                    row = closed_loop(target, level, texts, args.warmup, args.seconds)
                    log.info(
                        "%-32s c=%-3d %7.1f req/s  p50 %s ms  p99 %s ms  max %s ms  errors %d",
                        row.target,
                        level,
                        row.rps,
                        fmt(row.p50_ms),
                        fmt(row.p99_ms),
                        fmt(row.max_ms),
                        row.errors,
                    )
                    rows.append(row)
        finally:
            if infinity is not None:
                infinity.stop()
            gateway.stop()
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cpu": cpu_description(),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "concurrency": args.concurrency,
        "seconds": args.seconds,
        "warmup_s": args.warmup,
        "texts_per_request": args.texts_per_request,
        "targets": [t.name for t in targets],
        "left_out": left_out,
        "min_cosine_to_first": cosines,
        "rows": [asdict(row) for row in rows],
    }


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args)
    try:
        validate(args)
    except ValueError as exc:
        log.error("%s", exc)
        return 2

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        report = measure(args)
    except KeyboardInterrupt:
        log.error("interrupted; every server this run started was stopped")
        return 130
    except (RuntimeError, OSError) as exc:
        log.error("%s", exc)
        return 1
    (args.out / "report.json").write_text(json.dumps(report, indent=2))
    (args.out / "report.md").write_text(render(report))
    print(render(report))
    log.info("wrote %s", args.out / "report.md")
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
