"""Command-line options shared by every command that drives load (loadgen, tune, bench)."""

from __future__ import annotations

import argparse

from tools.cli.arguments import number_list
from tools.load.mixed_texts import LengthMix, parse_token_range
from tools.load.requests import RequestSettings, Target, request_factory
from tools.loadgen.measure import Measurement
from tools.loadgen.traffic import Traffic, load_trace, parse_priority_mix


def add_load_arguments(parser: argparse.ArgumentParser, default_model: str = "embed", default_concurrency: str = "1,16") -> None:
    """The load options; without --concurrency, --rate or --trace the closed loop runs `default_concurrency`."""
    target = parser.add_argument_group("target")
    target.add_argument(
        "--model",
        default=default_model,
        help="the served model; its config says texts (TYPE_STRING) or token ids (INT64); default %(default)s",
    )
    target.add_argument("--url", default=None, help="HTTP host:port of a running Triton (default: start a local one)")
    target.add_argument("--grpc-url", default=None, help="gRPC host:port of that server (default: same host, port 8001)")
    target.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    target.add_argument("--seq-len", type=int, default=128, help="tokens per request for the encoder (default %(default)s)")
    target.add_argument("--texts-per-request", type=int, default=1, help="rows per embed request")
    target.add_argument(
        "--texts",
        choices=("samples", "mixed"),
        default="samples",
        help="embed texts: short samples (3-40 tokens), or mixed queries and passages (tools/load/mixed_texts.py)",
    )
    target.add_argument("--passage-share", type=float, default=0.3, help="--texts mixed: share of passages (default %(default)s)")
    target.add_argument("--short-tokens", default="5-30", help="--texts mixed: query length range in tokens (default %(default)s)")
    target.add_argument("--long-tokens", default="100-256", help="--texts mixed: passage length range in tokens (default %(default)s)")
    load = parser.add_argument_group("traffic (closed loop: --concurrency; open loop: --rate or --trace)")
    load.add_argument(
        "--concurrency",
        type=lambda t: number_list(t, int),
        default=None,
        help=f"comma list, e.g. 1,4,16 (default {default_concurrency} unless --rate or --trace)",
    )
    parser.set_defaults(default_concurrency=number_list(default_concurrency, int))
    load.add_argument("--rate", type=lambda t: number_list(t, float), default=None, help="open-loop requests/s, comma list")
    load.add_argument("--distribution", choices=("poisson", "constant"), default="poisson")
    load.add_argument("--burst-rate", type=float, default=0.0, help="bursty: alternate --rate and this rate")
    load.add_argument("--burst-period", type=float, default=4.0, help="bursty: seconds per low+high cycle")
    load.add_argument("--trace", default=None, help="file of arrival offsets in seconds, one per line")
    load.add_argument("--priority-mix", default="", help="e.g. 1:0.2,2:0.8 (default: the model's default level)")
    load.add_argument("--timeout-us", type=int, default=None, help="per-request server-side timeout")
    window = parser.add_argument_group("measurement")
    window.add_argument("--warmup", type=float, default=2.0, help="seconds discarded first")
    window.add_argument("--window", type=float, default=4.0, help="seconds per measurement window")
    window.add_argument("--max-windows", type=int, default=8)
    window.add_argument("--stability", type=float, default=0.10, help="allowed spread of the last 3 windows")


def traffics_from_args(args: argparse.Namespace) -> list[Traffic]:
    """One Traffic per load level; conflicting or out-of-range options raise ValueError naming the option."""
    if args.trace and (args.rate or args.concurrency):
        raise ValueError("--trace replays its own arrival times: give it without --rate or --concurrency")
    if args.rate and args.concurrency:
        raise ValueError("give --concurrency (closed loop) or --rate (open loop), not both")
    if args.burst_rate and not args.rate:
        raise ValueError("--burst-rate alternates with --rate: give --rate too")
    if args.burst_rate < 0 or args.burst_period <= 0:
        raise ValueError("--burst-rate must not be negative and --burst-period must be above 0")
    if any(c < 1 for c in args.concurrency or []):
        raise ValueError(f"--concurrency values must be at least 1, got {args.concurrency}")
    if any(r <= 0 for r in args.rate or []):
        raise ValueError(f"--rate values must be above 0 req/s, got {args.rate}")
    if args.timeout_us is not None and args.timeout_us < 0:
        raise ValueError(f"--timeout-us cannot be negative, got {args.timeout_us}")
    mix = parse_priority_mix(args.priority_mix)
    common = {"priority_mix": mix, "timeout_us": args.timeout_us}
    if args.trace:
        return [Traffic(trace=load_trace(args.trace), **common)]
    if args.rate:
        burst = {"burst_rate": args.burst_rate, "burst_period_s": args.burst_period} if args.burst_rate else {}
        return [Traffic(rate=rate, distribution=args.distribution, **burst, **common) for rate in args.rate]
    return [Traffic(concurrency=c, **common) for c in (args.concurrency or args.default_concurrency)]


def check_load_arguments(args: argparse.Namespace) -> None:
    """Refuse bad load options before anything starts (ValueError with the option's name).
    Whether the model takes texts or token ids is the server's to say (target_from_args)."""
    request_settings_from_args(args)
    traffics_from_args(args)
    measurement_from_args(args)


def request_settings_from_args(args: argparse.Namespace, seq_len: int | None = None) -> RequestSettings:
    """What each request carries; `seq_len` overrides --seq-len (the tuner derives its own)."""
    mixed = getattr(args, "texts", "samples") == "mixed"
    if seq_len is None:
        seq_len = RequestSettings.seq_len if args.seq_len is None else args.seq_len
    return RequestSettings(seq_len, args.texts_per_request, length_mix_from_args(args) if mixed else None)


def target_from_args(args: argparse.Namespace, model_config) -> Target:
    """Requests for the served model whose config (`get_model_config`) is given: token ids
    for INT64 inputs, texts for a TYPE_STRING input (tools/load/requests.py)."""
    return request_factory(model_config, request_settings_from_args(args))


def length_mix_from_args(args: argparse.Namespace) -> LengthMix:
    """--passage-share, --short-tokens and --long-tokens as a LengthMix (ValueError naming the option)."""
    if not 0.0 <= args.passage_share <= 1.0:  # NaN fails too
        raise ValueError(f"--passage-share must be within 0..1, got {args.passage_share:g}")
    ranges = []
    for option, text in (("--short-tokens", args.short_tokens), ("--long-tokens", args.long_tokens)):
        try:
            ranges.append(parse_token_range(text))
            LengthMix(short_tokens=ranges[-1])  # the range rules live in LengthMix
        except ValueError as exc:
            raise ValueError(f"{option}: {exc}") from None
    return LengthMix(args.passage_share, *ranges)


def measurement_from_args(args: argparse.Namespace, models: tuple[str, ...] | None = None) -> Measurement:
    """The measurement windows; server statistics of `models` (default: --model alone)."""
    return Measurement(args.warmup, args.window, 3, args.max_windows, args.stability, models or (args.model,))
