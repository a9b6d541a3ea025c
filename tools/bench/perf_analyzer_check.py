"""`python -m tools.bench.perf_analyzer_check`: our load generator vs NVIDIA's perf_analyzer.

Both drive the `encoder` (1 x 128 tokens per request, gRPC, closed loop) on the same
local server, one after the other, at the same concurrency; throughput and p50 should
agree within 10%. perf_analyzer is the C++ binary shipped in the tritonclient 2.40.0
wheel; it is fetched with pip into build/ and run against the wheel-bundled libraries.
Its CSV output is parsed, never its stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.loadgen import Measurement, Traffic, encoder_target, run_load
from tools.loadgen.perf_csv import read_perf_csv
from tools.paths import BUILD_DIR, MODEL_REPOSITORY, REPO_ROOT
from tools.repo.model_config import load_config, without_priority_queues
from tools.serve.local_triton import TritonInstallation
from tools.serve.server_session import triton_endpoints

log = logging.getLogger("perf_analyzer_check")

WHEEL = "tritonclient==2.40.0"
HOME = BUILD_DIR / "perf_analyzer"
# perf_analyzer links these by their plain names; the pytriton wheel carries them hashed.
LIBRARY_ALIASES = {"libb64.so.0d": "libb64-", "libcudart.so.12": "libcudart-"}


def perf_analyzer_binary() -> tuple[Path, dict[str, str]]:
    binary = HOME / "perf_analyzer"
    if not binary.is_file():
        HOME.mkdir(parents=True, exist_ok=True)
        log.info("fetching perf_analyzer from %s", WHEEL)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", WHEEL, "-d", str(HOME)], check=True)
        wheel = next(HOME.glob("tritonclient-2.40.0-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            binary.write_bytes(archive.read("tritonclient-2.40.0.data/data/bin/perf_analyzer"))
        binary.chmod(0o755)
    libraries = TritonInstallation.find().libraries
    for alias, prefix in LIBRARY_ALIASES.items():
        link = HOME / alias
        if not link.exists():
            link.symlink_to(next(libraries.glob(f"{prefix}*")))
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join([str(HOME), str(libraries)]))
    return binary, env


def input_data(sequence_length: int, path: Path) -> Path:
    ids = np.random.default_rng(0).integers(1000, 30_000, size=sequence_length).tolist()
    document = {
        "data": [
            {
                "INPUT_IDS": {"content": ids, "shape": [sequence_length]},
                "ATTENTION_MASK": {"content": [1] * sequence_length, "shape": [sequence_length]},
            }
        ]
    }
    path.write_text(json.dumps(document))
    return path


def run_perf_analyzer(grpc_url: str, concurrency: int, sequence_length: int, window_ms: int, stability: float) -> dict:
    binary, env = perf_analyzer_binary()
    out = HOME / f"pa-c{concurrency}.csv"
    command = [
        str(binary),
        "-m",
        "encoder",
        "-u",
        grpc_url,
        "-i",
        "grpc",
        f"--concurrency-range={concurrency}",
        f"--input-data={input_data(sequence_length, HOME / 'input.json')}",
        f"--measurement-interval={window_ms}",
        "--max-trials=10",
        f"--stability-percentage={stability * 100:g}",
        "-f",
        str(out),
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"perf_analyzer failed ({result.returncode}): {result.stdout[-1500:]}{result.stderr[-1500:]}")
    row = read_perf_csv(out)[0]
    return {key: row[key] for key in ("throughput_rps", "p50_ms", "p99_ms")}


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.perf_analyzer_check", description=__doc__)
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--window", type=float, default=4.0, help="seconds per measurement window (both tools)")
    parser.add_argument("--stability", type=float, default=0.10, help="allowed spread of the last 3 windows (both tools)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "reports" / "perf_analyzer_check")
    add_verbosity_flags(parser)
    args = parser.parse_args(argv)
    configure_logging(args)
    rows = []
    measurement = Measurement(1.0, args.window, 3, 10, args.stability, ("encoder",))
    with triton_endpoints(None, explicit_control=True) as endpoints:
        endpoints.client.load("encoder", without_priority_queues(load_config(MODEL_REPOSITORY / "encoder")))
        for level in (int(c) for c in args.concurrency.split(",")):
            theirs = run_perf_analyzer(endpoints.grpc_url, level, args.seq_len, int(args.window * 1000), args.stability)
            ours = run_load(
                encoder_target(args.seq_len), Traffic(concurrency=level), measurement, endpoints.grpc_url, "grpc", endpoints.http_url
            )
            rows.append(
                {
                    "concurrency": level,
                    "perf_analyzer": theirs,
                    "loadgen": {"throughput_rps": ours.throughput_rps, "p50_ms": ours.latency.p50_ms, "p99_ms": ours.latency.p99_ms},
                    "throughput_ratio": ours.throughput_rps / theirs["throughput_rps"],
                    "p50_ratio": ours.latency.p50_ms / theirs["p50_ms"],
                }
            )
            log.info(
                "concurrency %d: perf_analyzer %s | loadgen %.1f req/s p50 %.1f ms", level, theirs, ours.throughput_rps, ours.latency.p50_ms
            )
    lines = [
        "| concurrency | perf_analyzer req/s | loadgen req/s | ratio | perf_analyzer p50 ms | loadgen p50 ms | ratio |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        pa, lg = r["perf_analyzer"], r["loadgen"]
        lines.append(
            f"| {r['concurrency']} | {pa['throughput_rps']:.1f} | {lg['throughput_rps']:.1f} | {r['throughput_ratio']:.2f} | "
            f"{pa['p50_ms']:.1f} | {lg['p50_ms']:.1f} | {r['p50_ratio']:.2f} |"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "check.json").write_text(json.dumps(rows, indent=1))
    (args.out / "check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(0.9 <= r["throughput_ratio"] <= 1.1 and 0.9 <= r["p50_ratio"] <= 1.1 for r in rows) else 1


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
