"""The simulator's one door to the load driver (tools/load, through loadgen's measurement windows).

Everything the simulator takes from the load driver passes through here: the traffic
specification (so predictions and measurements describe load the same way), the texts'
token lengths, and a live measurement reduced to the predict contract's fields.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from tools.load.mixed_texts import DEFAULT_TOKENIZER, LengthMix, MixedTexts
from tools.load.requests import (
    SAMPLE_TEXTS,
    TOKEN_IDS,
    RequestSettings,
    fetch_model_config,
    input_kind,
    request_factory,
    served_models,
    token_tensors,
)
from tools.load.schedules import Phase, arrivals
from tools.loadgen.measure import Measurement, run_load
from tools.loadgen.traffic import Traffic, load_trace, parse_priority_mix

__all__ = [
    "SAMPLE_TEXTS",
    "LengthMix",
    "Measured",
    "MixedTexts",
    "Phase",
    "Traffic",
    "arrivals",
    "full_budget_window",
    "load_trace",
    "measure",
    "parse_priority_mix",
    "sample_lengths",
    "token_tensors",
]


QUICK = {"warmup_s": 1.0, "window_s": 2.0, "stable_windows": 3, "max_windows": 4, "stability": 0.10}  # a validation's load level


def full_budget_window() -> tuple[float, float]:
    """The span a quick measurement that never settled counts: its last 3 of 4 windows."""
    q = QUICK
    return q["warmup_s"] + (q["max_windows"] - q["stable_windows"]) * q["window_s"], q["warmup_s"] + q["max_windows"] * q["window_s"]


@functools.cache
def sample_lengths() -> tuple[int, ...]:
    """Tokens ([CLS] and [SEP] included) of the load driver's sample texts as it sends them,
    with the unique suffix it appends (` #<8 hex>-<counter>`); request i carries text i mod 8."""
    from tokenizers import Tokenizer

    if not DEFAULT_TOKENIZER.is_file():
        raise ValueError(f"tokenizer file {DEFAULT_TOKENIZER} not found; run `make export`")
    tokenizer = Tokenizer.from_file(str(DEFAULT_TOKENIZER))
    return tuple(len(tokenizer.encode(f"{text} #3f9a1c2e-12345").ids) for text in SAMPLE_TEXTS)


@dataclass(frozen=True)
class Measured:
    """One live load level in the predict contract's terms (None: no successful request)."""

    throughput_rps: float
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    avg_batch: float | None  # encoder rows per execution, from Triton's statistics
    tokenizer_avg_batch: float | None
    batch_histogram: dict[int, int]
    outcomes: dict[str, int]
    stable: bool
    window_s: tuple[float, float] | None = None  # seconds from the start of the run: the requests the figures count
    mean_ms: float | None = None
    server_ms: dict[str, dict[str, float | None]] | None = None  # model -> average queue and compute ms per request

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def measure(
    http_url: str, grpc_url: str, traffic: Traffic, texts: str = "samples", model: str = "embed", quick: bool = True, seq_len: int = 32
) -> Measured:
    """Drive one load level through `model` and read the client's and the server's figures."""
    config = fetch_model_config(http_url, model)  # texts or token ids: the served config says
    mixed = texts == "mixed" and input_kind(config) != TOKEN_IDS
    target = request_factory(config, RequestSettings(seq_len=seq_len, length_mix=LengthMix() if mixed else None))
    models = served_models(config)
    measurement = Measurement(**QUICK, server_models=models)
    if not quick:
        measurement = Measurement(server_models=models)
    result = run_load(target, traffic, measurement, grpc_url, "grpc", http_url)
    used = min(measurement.stable_windows, result.windows)  # the engine's figures cover its last `used` windows
    encoder = result.server.get("encoder")
    tokenizer = result.server.get("tokenizer")
    latency = result.latency
    return Measured(
        throughput_rps=result.throughput_rps,
        p50_ms=latency.p50_ms,
        p90_ms=latency.p90_ms,
        p99_ms=latency.p99_ms,
        avg_batch=encoder.average_batch_size if encoder else None,
        tokenizer_avg_batch=tokenizer.average_batch_size if tokenizer else None,
        batch_histogram=dict(encoder.batch_executions) if encoder else {},
        outcomes=dict(result.outcomes),
        stable=result.stable,
        window_s=(
            measurement.warmup_s + (result.windows - used) * measurement.window_s,
            measurement.warmup_s + result.windows * measurement.window_s,
        ),
        mean_ms=latency.mean_ms,
        server_ms={name: {"queue": w.average_queue_ms, "compute": w.average_compute_ms} for name, w in result.server.items()},
    )
