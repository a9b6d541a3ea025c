"""`python -m tools.bench.padding`: which sequence padding policy lets Triton batch.

When the encoder's inputs are not ragged, its dynamic batcher joins only requests of
equal shape, so the tokenizer's padding decides batching. Compared side by side in one
run, on the `embed` ensemble with short mixed-length texts and the encoder loaded
without ragged inputs (the shape-based policies; `make bench-lengths` compares them with
the committed `ragged` policy), tokenizer config reloaded live for each policy:
- per request: the tokenizer runs each request alone (no tokenizer batching), padded
  to its own length: shapes rarely match;
- per tokenizer batch (the `batch` policy): every request of one tokenizer execution padded to
  the longest, rounded up to a multiple of 16;
- fixed length: everything padded to the model's maximum (256): shapes always match,
  at the cost of computing the padding.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.loadgen import Measurement, Traffic, embed_target, run_load
from tools.loadgen.report import format_ms
from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.repo.length_policy import set_encoder_policy, set_tokenizer_policy
from tools.repo.model_config import ModelConfig, load_config
from tools.serve.server_session import triton_endpoints

log = logging.getLogger("padding")


def tokenizer_policy(base: ModelConfig, name: str) -> ModelConfig:
    config = ModelConfig()
    config.CopyFrom(base)
    set_tokenizer_policy(config, "batch")  # the shape-based starting point, whatever is committed
    if name == "per request":
        config.ClearField("dynamic_batching")
        config.parameters["pad_to_multiple_of"].string_value = "1"
    elif name == "fixed length (256)":
        config.parameters["pad_to_multiple_of"].string_value = "256"
    return config


POLICIES = ("per request", "per tokenizer batch, multiple of 16 (`batch`)", "fixed length (256)")


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.padding", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--window", type=float, default=3.0)
    parser.add_argument("--max-windows", type=int, default=5)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "reports" / "padding")
    add_verbosity_flags(parser)
    args = parser.parse_args(argv)
    configure_logging(args)
    base = load_config(MODEL_REPOSITORY / "tokenizer")
    measurement = Measurement(1.5, args.window, 3, args.max_windows, 0.10, ("tokenizer", "encoder"))
    rows = []
    encoder = load_config(MODEL_REPOSITORY / "encoder")
    set_encoder_policy(encoder, "batch")
    with triton_endpoints(None, explicit_control=True) as endpoints:
        endpoints.client.load("encoder", encoder)
        for policy in POLICIES:
            endpoints.client.load("tokenizer", tokenizer_policy(base, policy))
            for level in (int(c) for c in args.concurrency.split(",")):
                result = run_load(embed_target(), Traffic(concurrency=level), measurement, endpoints.grpc_url, "grpc", endpoints.http_url)
                encoder = result.server["encoder"]
                rows.append(
                    {
                        "policy": policy,
                        "concurrency": level,
                        "throughput_rps": result.throughput_rps,
                        "p50_ms": result.latency.p50_ms,
                        "p99_ms": result.latency.p99_ms,
                        "encoder_batch": encoder.average_batch_size,
                        "encoder_compute_ms": encoder.average_compute_ms,
                        "errors": result.error_count,
                        "stable": result.stable,
                    }
                )
                log.info("%-48s %s", policy, result.one_line())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "padding.json").write_text(json.dumps(rows, indent=1))
    lines = ["| padding policy | concurrency | req/s | p50 ms | p99 ms | avg encoder batch |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    lines += [
        f"| {r['policy']} | {r['concurrency']} | {r['throughput_rps']:.1f} | {format_ms(r['p50_ms'])} | {format_ms(r['p99_ms'])} | "
        f"{format_ms(r['encoder_batch'], '.2f')} |"
        for r in rows
    ]
    (args.out / "padding.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
