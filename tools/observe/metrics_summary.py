"""`python -m tools.observe.metrics_summary`: the dashboard's figures in the terminal, for users without Grafana.

Reads Triton's Prometheus endpoint (per-model counters, including failure reasons and
the response cache) and its statistics API (the executed batch-size histogram, which
the metrics do not carry). Without `--interval` the figures are cumulative since each
model loaded; with `--interval N` two snapshots N seconds apart are subtracted, so they
describe only the traffic of that window (the same figures as the recording rules).

Warm-up is not traffic. Triton 2.51 counts a model's `model_warmup` runs in its
statistics and metrics as successful requests (measured on a fresh server: the encoder's
two samples of 1 and 8 rows on 2 instances read as 18 requests in 4 executions, 20 s of
"request time"). Since load, the counts here leave the warm-up out, computed from the
config the server runs (samples x iterations x instances); Triton keeps no separate
warm-up times, so a model's times since load include its warm-up (the table says so
when it matters) and `--interval N`, which starts after it, is the way to time traffic.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace

from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.contract import DEFAULT_HTTP_URL, DEFAULT_METRICS_URL
from tools.observe.llm.summary import llm_rows
from tools.repo.instances import instance_count
from tools.repo.model_config import ModelConfig
from tools.triton_client import MetricSample, TritonClient, TritonError
from tools.triton_client.stats import ModelStats

log = logging.getLogger("metrics")


@dataclass
class ModelMetrics:
    """One model's counters from the metrics endpoint (summed over versions)."""

    values: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    failures: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # reason -> count

    def __sub__(self, earlier: ModelMetrics) -> ModelMetrics:
        result = ModelMetrics()
        for key in set(self.values) | set(earlier.values):
            result.values[key] = self.values.get(key, 0.0) - earlier.values.get(key, 0.0)
        for key in set(self.failures) | set(earlier.failures):
            result.failures[key] = self.failures.get(key, 0.0) - earlier.failures.get(key, 0.0)
        return result


def metrics_by_model(samples: list[MetricSample]) -> dict[str, ModelMetrics]:
    """Triton's per-model samples (nv_*), summed over versions; failures also by reason."""
    models: dict[str, ModelMetrics] = defaultdict(ModelMetrics)
    for name, labels, value in samples:
        model = labels.get("model")
        if not model or not name.startswith("nv_"):
            continue
        if name == "nv_inference_request_failure":
            models[model].failures[labels.get("reason", "UNKNOWN")] += value
        models[model].values[name] += value
    return dict(models)


@dataclass(frozen=True)
class WarmUp:
    """What a model's warm-up adds to its counters at every load: each `model_warmup`
    sample runs max(1, count) times on every instance, one execution of `batch_size` rows
    that Triton 2.51 records as `batch_size` successful requests."""

    requests: int = 0
    executions: int = 0
    batches: dict[int, int] = field(default_factory=dict)  # batch size -> executions


def warmup_of(config: ModelConfig) -> WarmUp:
    instances = instance_count(config)
    batches: dict[int, int] = {}
    for sample in config.model_warmup:
        size = max(1, sample.batch_size)
        batches[size] = batches.get(size, 0) + instances * max(1, sample.count)
    return WarmUp(sum(size * n for size, n in batches.items()), sum(batches.values()), batches)


def fetch_warmup(client: TritonClient, model: str) -> WarmUp:
    """The warm-up of the config the server runs now (not the committed file: a tuner may have reloaded it).
    Read leniently: only the warm-up samples and instance groups matter here."""
    return warmup_of(client.config(model, strict=False))


@dataclass(frozen=True)
class ServerReading:
    """What the metrics endpoint and the statistics API say at one moment; two readings
    subtract into a window."""

    at: float
    metrics: dict[str, ModelMetrics]
    stats: dict[str, ModelStats]
    warmups: dict[str, WarmUp] = field(default_factory=dict)


def read_server(client: TritonClient) -> ServerReading:
    metrics = metrics_by_model(client.metrics())
    stats = {model: client.statistics(model) for model in sorted(metrics)}
    warmups = {model: fetch_warmup(client, model) for model in sorted(metrics)}
    return ServerReading(time.monotonic(), metrics, stats, warmups)


def without_warmup(metrics: ModelMetrics, stats: ModelStats, warmup: WarmUp) -> tuple[ModelMetrics, ModelStats, int]:
    """Counters since load less the warm-up's runs (never below what the server reports);
    the durations stay, Triton keeps no warm-up times apart. Also returns the requests removed."""
    batches = {size: min(n, stats.batch_executions.get(size, 0)) for size, n in warmup.batches.items()}
    requests = sum(size * n for size, n in batches.items())
    executions = sum(batches.values())
    if not executions:
        return metrics, stats, 0
    counts = ModelMetrics()
    counts.values.update(metrics.values)
    counts.failures.update(metrics.failures)
    for name, removed in (
        ("nv_inference_request_success", requests),
        ("nv_inference_count", requests),
        ("nv_inference_exec_count", executions),
    ):
        counts.values[name] = max(0.0, counts.values.get(name, 0.0) - removed)
    histogram = {size: n - batches.get(size, 0) for size, n in stats.batch_executions.items()}
    traffic = replace(
        stats,
        requests=max(0, stats.requests - requests),
        inferences=max(0, stats.inferences - requests),
        executions=max(0, stats.executions - executions),
        batch_executions={size: n for size, n in histogram.items() if n > 0},
    )
    return counts, traffic, requests


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def summary_rows(later: ServerReading, earlier: ServerReading | None = None) -> list[dict[str, object]]:
    """One row per model: the figures of the recording rules, over the window (or since load)."""
    rows = []
    seconds = later.at - earlier.at if earlier else None
    for model in sorted(later.metrics):
        if earlier and model in earlier.metrics:
            metrics, stats, warm = later.metrics[model] - earlier.metrics[model], later.stats[model] - earlier.stats[model], 0
        else:  # since load: the warm-up ran first and is not traffic
            metrics, stats, warm = without_warmup(later.metrics[model], later.stats[model], later.warmups.get(model, WarmUp()))
        v = metrics.values
        success = v.get("nv_inference_request_success", 0.0)
        timed = success if success else None  # no traffic: no time (never 0.0); with warm-up runs their time stays in
        failed = sum(metrics.failures.values())
        compute = sum(v.get(f"nv_inference_compute_{part}_duration_us", 0.0) for part in ("input", "infer", "output"))
        hits, misses = v.get("nv_cache_num_hits_per_model", 0.0), v.get("nv_cache_num_misses_per_model", 0.0)
        top = sorted(stats.batch_executions.items(), key=lambda item: -item[1])[:3]
        rows.append(
            {
                "model": model,
                "requests": int(success + failed),
                "req/s": _ratio(success + failed, seconds) if seconds else None,
                "failed": int(failed),
                "rejected": int(metrics.failures.get("REJECTED", 0.0)),
                "avg batch": _ratio(v.get("nv_inference_count", 0.0), v.get("nv_inference_exec_count", 0.0)),
                "queue ms": _per_request_ms(v.get("nv_inference_queue_duration_us", 0.0), timed, warm),
                "compute ms": _per_request_ms(compute, timed, warm),
                "total ms": _per_request_ms(v.get("nv_inference_request_duration_us", 0.0), timed, warm),
                "cache hit": _ratio(hits, hits + misses) if "nv_cache_num_hits_per_model" in v else None,
                "pending": int(later.metrics[model].values.get("nv_inference_pending_request_count", 0.0)),
                "batches (size x n)": " ".join(f"{size}x{count}" for size, count in top) or "-",
                "warm-up": warm,
            }
        )
    return rows


def _per_request_ms(total_us: float, requests: float | None, warmup_requests: int) -> float | None:
    """Mean per request; the warm-up's requests still count where its time still does."""
    return None if requests is None else total_us / ((requests + warmup_requests) * 1000)


def format_table(rows: list[dict[str, object]]) -> str:
    if not rows:
        return "no model reports metrics yet"

    def cell(value: object) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.3f}" if value < 10 else f"{value:.1f}"
        return str(value)

    columns = list(rows[0])
    table = [columns] + [[cell(row[column]) for column in columns] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    return "\n".join(
        "  ".join(text.rjust(width) if i else text.ljust(width) for i, (text, width) in enumerate(zip(line, widths))) for line in table
    )


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.observe.metrics_summary", description=__doc__)
    parser.add_argument("--url", default=DEFAULT_HTTP_URL, help="Triton HTTP host:port (statistics API)")
    parser.add_argument("--metrics-url", default=DEFAULT_METRICS_URL, help="Triton's Prometheus endpoint")
    parser.add_argument("--interval", type=float, default=0.0, help="seconds between two snapshots; 0: cumulative since load")
    add_verbosity_flags(parser)
    args = parser.parse_args(argv)
    configure_logging(args)
    try:
        client = TritonClient(args.url, metrics_url=args.metrics_url)
        first, first_samples = read_server(client), client.metrics()
        if args.interval > 0:
            log.info("measuring for %.0f s ...", args.interval)
            time.sleep(args.interval)
            rows = summary_rows(read_server(client), first)
            generative = llm_rows(client.metrics(), first_samples, args.interval)
            title = f"Triton over the last {args.interval:.0f} s"
        else:
            rows = summary_rows(first)
            generative = llm_rows(first_samples)
            title = "Triton since each model loaded (cumulative)"
    except TritonError as exc:
        log.error("cannot read Triton's metrics at %s / %s: %s (is the server running? `make serve`)", args.metrics_url, args.url, exc)
        return 1
    print(f"{title}; times are per request, ms")
    print(format_table(rows))
    if generative:
        print("\nLLM (engine steps; latency percentiles estimated from the histograms' buckets, ms)")
        print(format_table(generative))
    warmed = [str(row["model"]) for row in rows if row["warm-up"]]
    if warmed:
        log.info(
            "the warm-up of %s (column warm-up: its requests) is left out of the counts; Triton keeps no warm-up times "
            "apart, so the times of a model with traffic include it (--interval N excludes it)",
            ", ".join(warmed),
        )
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
