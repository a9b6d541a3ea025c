"""`python -m tools.bench` (`make bench`): one run, side by side, written to Markdown + JSON.

1. the raw engine: in-process ONNX Runtime rows/s at batch sizes 1..64 (the ceiling);
2. Triton's encoder without dynamic batching, with the committed config, with the tuner's
   winner (if a tune report exists) and with Model Analyzer's reported pick
   (max_batch_size 8, `dynamic_batching {}`), each at several concurrencies and at a
   Poisson rate, applied live through the model-control API;
3. a naive in-process "queue + thread + timeout" batcher under the same load.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import asdict
from pathlib import Path

from tools.bench.engine import NaiveBatcher, drive_naive, open_session, raw_curve
from tools.bench.render import render_markdown
from tools.loadgen import Measurement, Traffic, embed_target, encoder_target, run_load
from tools.local_triton import TritonStartError
from tools.logsetup import add_verbosity_flags, configure_logging
from tools.model_config import ModelConfig, load_config
from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.repository_check import ensemble_batch_floor
from tools.server_session import triton_endpoints
from tools.tuning.reload import ReloadError, load_with_config
from tools.tuning.space import core_budget, with_instances

log = logging.getLogger("bench")


def model_analyzer_pick(base: ModelConfig, batch_floor: int) -> ModelConfig:
    """What Model Analyzer recommended for this encoder here: max batch 8 and the default
    batcher (`dynamic_batching {}`), one instance. Where an ensemble needs a larger
    max_batch_size (Triton refuses the ensemble otherwise), batches are held to 8 by a
    preferred size."""
    config = ModelConfig()
    config.CopyFrom(base)
    config.ClearField("dynamic_batching")
    config.dynamic_batching.SetInParent()
    del config.instance_group[1:]
    config = with_instances(config, 1, core_budget(base))  # one instance on all the committed cores
    config.max_batch_size = max(8, batch_floor)
    if batch_floor > 8:
        config.dynamic_batching.preferred_batch_size.append(8)
    warmups = [w for w in config.model_warmup if w.batch_size <= config.max_batch_size]
    del config.model_warmup[:]
    config.model_warmup.extend(warmups)
    return config


def without_batching(base: ModelConfig) -> ModelConfig:
    config = ModelConfig()
    config.CopyFrom(base)
    config.ClearField("dynamic_batching")
    return config


def configs_to_compare(
    base: ModelConfig, winner_path: Path | None, include_model_analyzer: bool, batch_floor: int
) -> dict[str, ModelConfig]:
    configs = {"no dynamic batching": without_batching(base), "committed config": base}
    if winner_path and winner_path.is_file():
        configs["tuner winner"] = load_config(winner_path)
    elif winner_path:
        log.warning("no tuner winner at %s (run `make tune` first); left out", winner_path)
    if include_model_analyzer:
        configs["Model Analyzer pick"] = model_analyzer_pick(base, batch_floor)
    return configs


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--target",
        choices=("embed", "encoder"),
        default="embed",
        help="send load through the ensemble (texts; default) or straight to the encoder (fixed-length token ids)",
    )
    parser.add_argument(
        "--seq-len",
        type=int,
        default=None,
        help="tokens per request for the raw engine, the naive batcher and --target encoder "
        "(default 32 with embed: the benchmark texts pad to 16-48; 128 with encoder, as in Model Analyzer's run)",
    )
    parser.add_argument("--concurrency", default="1,4,16", help="closed-loop levels (default %(default)s)")
    parser.add_argument("--rate", type=float, default=0.0, help="Poisson rate in req/s (default: 40%% of the raw engine's best)")
    parser.add_argument("--batch-sizes", default="1,2,4,8,16,32,64", help="raw engine batch sizes")
    parser.add_argument("--winner", type=Path, default=REPO_ROOT / "reports" / "tune-encoder" / "config.pbtxt")
    parser.add_argument("--no-model-analyzer", action="store_true", help="leave out Model Analyzer's pick")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "reports" / "bench")
    parser.add_argument("--window", type=float, default=3.0, help="seconds per measurement window")
    parser.add_argument("--max-windows", type=int, default=5)
    parser.add_argument("--warmup", type=float, default=1.5)
    add_verbosity_flags(parser)
    args = parser.parse_args(argv)
    configure_logging(args)
    started = time.perf_counter()
    args.seq_len = args.seq_len or (32 if args.target == "embed" else 128)
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    base = load_config(MODEL_REPOSITORY / "encoder")
    session = open_session(MODEL_REPOSITORY / "encoder" / "1" / "model.onnx")

    log.info("[1/3] raw engine curve at %d tokens", args.seq_len)
    raw = raw_curve(session, args.seq_len, [int(b) for b in args.batch_sizes.split(",")], min_seconds=args.window / 2)
    best = max(raw, key=lambda p: p.rows_per_s)
    rate = args.rate or max(1.0, round(0.4 * best.rows_per_s))
    traffics = [Traffic(concurrency=c) for c in levels] + [Traffic(rate=rate, seed=11)]
    measurement = Measurement(args.warmup, args.window, 3, args.max_windows, 0.10, ("encoder",))
    target = embed_target() if args.target == "embed" else encoder_target(args.seq_len)
    floor = ensemble_batch_floor(MODEL_REPOSITORY, "encoder")[0] if args.target == "embed" else 0

    served: dict[str, list[dict]] = {}
    log.info("[2/3] Triton configs under %s", ", ".join(t.label() for t in traffics))
    try:
        with triton_endpoints(None, explicit_control=True) as endpoints:
            for name, config in configs_to_compare(base, args.winner, not args.no_model_analyzer, floor).items():
                try:
                    load_with_config(endpoints.http_url, "encoder", config, endpoints.headers)
                except ReloadError as exc:
                    log.error("%s: %s", name, exc)
                    served[name] = []
                    continue
                served[name] = []
                for traffic in traffics:
                    result = run_load(target, traffic, measurement, endpoints.grpc_url, "grpc", endpoints.http_url)
                    log.info("%-20s %s", name, result.one_line())
                    served[name].append(result.to_dict())
    except TritonStartError as exc:
        log.error("%s", exc)
        return 1

    log.info("[3/3] naive in-process batcher (max batch %d, timeout %d us)", base.max_batch_size,
             base.dynamic_batching.max_queue_delay_microseconds)  # fmt: skip
    naive = []
    for traffic in traffics:
        batcher = NaiveBatcher(session, base.max_batch_size, base.dynamic_batching.max_queue_delay_microseconds / 1e6)
        seconds = args.window * 2
        if traffic.closed_loop:
            result = drive_naive(
                batcher, args.seq_len, traffic.label(), concurrency=traffic.concurrency, warmup_s=args.warmup, seconds=seconds
            )
        else:
            result = drive_naive(
                batcher,
                args.seq_len,
                traffic.label(),
                arrivals=traffic.arrivals(args.warmup + seconds),
                warmup_s=args.warmup,
                seconds=seconds,
            )
        batcher.close()
        log.info("%-20s %s: %.1f req/s p99 %.1f ms", "naive batcher", result.label, result.throughput_rps, result.latency.p99_ms)
        naive.append(asdict(result))

    settings = {"target": target.describe, "sequence_length": args.seq_len, "concurrency": levels, "poisson_rate": rate,
                "window_s": args.window, "max_windows": args.max_windows, "runs": 1}  # fmt: skip
    report = {
        "settings": settings,
        "raw_engine": [asdict(p) for p in raw],
        "served": served,
        "naive_batcher": naive,
        "seconds": time.perf_counter() - started,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=1))
    (args.out / "report.md").write_text(render_markdown(report))
    print((args.out / "report.md").read_text())
    log.info("wrote %s and %s in %.0f s", args.out / "report.md", args.out / "report.json", report["seconds"])
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
