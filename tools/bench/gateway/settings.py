"""The benchmark's options, declared once beside the typed settings they fill."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from tools.bench.gateway.infinity_server import INFINITY_VENV
from tools.paths import REPO_ROOT


def parse_levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, not {text!r}") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError("concurrency levels must be at least 1")
    return levels


@dataclass(frozen=True)
class GatewayBenchSettings:
    concurrency: list[int] = field(default_factory=lambda: [1, 16, 64])  # closed-loop levels
    seconds: float = 6.0  # measured per target and level
    warmup_s: float = 2.0  # sent before measuring, per target and level
    texts_per_request: int = 1
    infinity_venv: Path = INFINITY_VENV
    infinity_engine: str = "optimum"
    infinity: bool = True
    out: Path = REPO_ROOT / "reports" / "bench-gateway"

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        defaults = GatewayBenchSettings()
        parser.add_argument("--concurrency", type=parse_levels, default=defaults.concurrency, help="closed-loop levels (default 1,16,64)")
        parser.add_argument("--seconds", type=float, default=defaults.seconds, help="measured seconds per target and level")
        parser.add_argument("--warmup", type=float, default=defaults.warmup_s, help="seconds sent before measuring, per target and level")
        parser.add_argument("--texts-per-request", type=int, default=defaults.texts_per_request)
        parser.add_argument(
            "--infinity-venv", type=Path, default=defaults.infinity_venv, help="virtual environment with infinity-emb (its own)"
        )
        parser.add_argument(
            "--infinity-engine", default=defaults.infinity_engine, help="infinity's engine: optimum (ONNX Runtime) or torch"
        )
        parser.add_argument("--no-infinity", action="store_true", help="leave infinity-emb out")
        parser.add_argument("--out", type=Path, default=defaults.out)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> GatewayBenchSettings:
        """Checked settings (ValueError names the option)."""
        if args.seconds <= 0 or args.warmup < 0:
            raise ValueError("--seconds must be positive and --warmup not negative")
        if args.texts_per_request < 1:
            raise ValueError("--texts-per-request must be at least 1")
        return cls(
            concurrency=args.concurrency,
            seconds=args.seconds,
            warmup_s=args.warmup,
            texts_per_request=args.texts_per_request,
            infinity_venv=args.infinity_venv,
            infinity_engine=args.infinity_engine,
            infinity=not args.no_infinity,
            out=args.out,
        )
