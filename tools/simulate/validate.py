"""`validate`: predict each config under each load, then measure it live, and compare.

Configs are loaded on the server as the tuner does (a live reload with a config
override; the server's own config is loaded back at the end). Errors are relative to
the measurement: (predicted - measured) / measured. The summary is the median absolute
error per figure over all rows.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tools.cli.arguments import number_list
from tools.serve.admin_key import resolve_admin_key
from tools.simulate.batcher import BatcherSpec
from tools.simulate.cli import ModelSettings, model_settings, read_config, traffic_of
from tools.simulate.configs import load_entries
from tools.simulate.live_load import Traffic, full_budget_window, measure
from tools.simulate.predict import predict
from tools.simulate.workload import Workload
from tools.triton_client import TritonError

log = logging.getLogger("simulate")

FIGURES = ("throughput_rps", "p99_ms", "avg_batch")
# the median absolute error within which the simulator can rank configs before they are measured
TARGETS = {"throughput_rps": 0.10, "p99_ms": 0.25, "avg_batch": 0.20}


@dataclass(frozen=True)
class ValidateSettings:
    """`validate`'s options (tools/simulate/__main__.py declares them) as typed values, checked."""

    model: ModelSettings
    cost_model: Path
    configs: Path  # YAML or JSON list of batching configs
    loads: list[Traffic]
    json: Path  # the rows are written here (and .md, .png beside it)
    requests: int  # per prediction
    measured: Path | None = None  # reuse an earlier validation's measurements (no server)
    base_config: Path | None = None  # with measured: the encoder config the configs were applied to
    url: str | None = None
    grpc_url: str | None = None
    admin_key: str | None = None
    plot: bool = True

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> ValidateSettings:
        if args.requests < 1:
            raise ValueError(f"the traffic has no requests (--requests {args.requests})")
        concurrencies = number_list(args.concurrency, int, "--concurrency")
        rates = number_list(args.rate, float, "--rate")
        loads = [traffic_of(c, None, args) for c in concurrencies] + [traffic_of(None, r, args) for r in rates]
        if args.trace:
            loads.append(traffic_of(None, None, args))
        if not loads:
            raise ValueError("the traffic has no requests: give --concurrency, --rate or --trace")
        return cls(
            model=model_settings(args),
            cost_model=args.cost_model,
            configs=args.configs,
            loads=loads,
            json=args.json,
            requests=args.requests,
            measured=args.measured,
            base_config=args.base_config,
            url=args.url,
            grpc_url=args.grpc_url,
            admin_key=resolve_admin_key(args.admin_key_file, args.admin_key),
            plot=not args.no_plot,
        )


def relative_error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None or measured == 0:
        return None
    return (predicted - measured) / measured


def medians(rows: list[dict]) -> dict:
    out = {}
    for figure in FIGURES:
        errors = [abs(r["errors"][figure]) for r in rows if r["errors"].get(figure) is not None]
        out[figure] = {"median_abs_error": float(np.median(errors)) if errors else None, "target": TARGETS[figure], "rows": len(errors)}
    return out


def summary(rows: list[dict]) -> dict:
    """Median absolute errors over all rows, and over the rows that say more: an open-loop
    level below capacity serves its offered rate whatever the config (its throughput is
    predicted by construction), and a row whose measured batch is 1 tests no joining."""
    closed = [r for r in rows if r["load"].startswith("concurrency")]
    batching = [r for r in rows if (r["measured"].get("avg_batch") or 1.0) > 1.05]
    return {"all": medians(rows), "closed_loop": medians(closed), "batching": medians(batching)}


def table(rows: list[dict]) -> str:
    def cell(value: float | None, spec: str = ".1f") -> str:
        return "-" if value is None else format(value, spec)

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value * 100:+.0f}%"

    lines = [
        "| config | load | req/s pred | req/s meas | err | p99 pred | p99 meas | err | batch pred | batch meas | err |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        p, m, e = r["predicted"], r["measured"], r["errors"]
        lines.append(
            f"| {r['config']} | {r['load']} | {cell(p['throughput_rps'])} | {cell(m['throughput_rps'])} | {pct(e['throughput_rps'])} | "
            f"{cell(p['p99_ms'])} | {cell(m['p99_ms'])} | {pct(e['p99_ms'])} | {cell(p['avg_batch'], '.2f')} | "
            f"{cell(m['avg_batch'], '.2f')} | {pct(e['avg_batch'])} |"
        )
    return "\n".join(lines)


def summary_cell(figure: str, values: dict) -> str:
    error = values["median_abs_error"]
    return f"{figure} {'-' if error is None else format(error * 100, '.0f') + '%'} (target {TARGETS[figure] * 100:.0f}%)"


def row_of(entry, traffic: Traffic, predicted, measured: dict) -> dict:
    return {
        "config": entry.name,
        "settings": entry.to_dict(),
        "load": traffic.label(),
        "predicted": predicted.to_dict(),
        "measured": measured,
        "errors": {f: relative_error(getattr(predicted, f), measured.get(f)) for f in FIGURES},
    }


def progress(number: int, total: int, row: dict) -> None:
    p, m, e = row["predicted"], row["measured"], row["errors"]
    print(
        f"[{number}/{total}] {row['config']:32} {row['load']:20} req/s {p['throughput_rps']:6.1f} vs {m['throughput_rps']:6.1f}  "
        f"p99 {p['p99_ms'] or 0:6.1f} vs {m['p99_ms'] or 0:6.1f}  batch {p['avg_batch'] or 0:.2f} vs {m['avg_batch'] or 0:.2f}  errors "
        + " ".join("-" if e[f] is None else f"{e[f] * 100:+.0f}%" for f in FIGURES),
        flush=True,
    )


def predict_like(settings, spec: BatcherSpec, traffic: Traffic, requests: int, window_s: tuple[float, float] | None):
    """A prediction counted as the measurement counted: open-loop throughput over the same
    span of the same seeded arrival schedule (a few seconds of Poisson arrivals hold
    noticeably more or fewer than rate x seconds)."""
    if window_s and not traffic.closed_loop:
        rate = max(traffic.rate, traffic.burst_rate)
        requests = max(requests, int(window_s[1] * rate * 1.5) + 10)
    workload = Workload(traffic, requests, settings.lengths, settings.cache_hit_rate, window_s=window_s)
    return predict(settings.cost, settings.steps(spec), workload, settings.seed, settings.stall)


def measure_live(settings: ValidateSettings, entries: list) -> list[dict]:
    from tools.serve.server_session import triton_endpoints

    rows: list[dict] = []
    with triton_endpoints(settings.url, settings.grpc_url, explicit_control=True, admin_key=settings.admin_key) as endpoints:
        control = endpoints.client
        base = control.config("encoder")
        try:
            control.load("encoder", base)
        except TritonError as exc:
            if exc.reloads_refused:
                raise ValueError(f"the server at {endpoints.http_url} is not in explicit model-control mode") from None
            raise
        configs = [(entry, entry.build(base)) for entry in entries]  # a config that cannot be built fails before any load
        with control.restoring("encoder", base):
            for number, (entry, config) in enumerate(configs, start=1):
                spec = BatcherSpec.from_config(config)
                control.load("encoder", config)
                for traffic in settings.loads:
                    measured = measure(endpoints.http_url, endpoints.grpc_url, traffic, texts=settings.model.lengths.kind)
                    predicted = predict_like(settings.model, spec, traffic, settings.requests, measured.window_s)
                    rows.append(row_of(entry, traffic, predicted, measured.to_dict()))
                    progress(number, len(configs), rows[-1])
    return rows


def reuse_measurements(settings: ValidateSettings, entries: list) -> list[dict]:
    """Predict again against the measurements of an earlier validation (same configs and
    loads): a changed cost model or simulator is checked in seconds, without a server."""
    try:
        earlier = json.loads(Path(settings.measured).read_text())
        measured = {(row["config"], row["load"]): row["measured"] for row in earlier["rows"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"--measured {settings.measured}: not a validation result ({exc})") from None
    base = read_config(settings.base_config)
    rows = []
    for number, entry in enumerate(entries, start=1):
        spec = BatcherSpec.from_config(entry.build(base))
        for traffic in settings.loads:
            if (entry.name, traffic.label()) not in measured:
                raise ValueError(f"--measured {settings.measured} has no measurement of {entry.name} under {traffic.label()}")
            # Older results do not say which windows counted: the engine's full budget, where
            # an unstable run (the rule on a shared machine) ends.
            earlier_window = measured[(entry.name, traffic.label())].get("window_s") or full_budget_window()
            predicted = predict_like(settings.model, spec, traffic, settings.requests, tuple(earlier_window))
            rows.append(row_of(entry, traffic, predicted, measured[(entry.name, traffic.label())]))
            progress(number, len(entries), rows[-1])
    return rows


def run_validate(settings: ValidateSettings) -> int:
    entries = load_entries(settings.configs)
    started = time.perf_counter()
    if settings.measured:
        rows = reuse_measurements(settings, entries)
    else:
        rows = measure_live(settings, entries)
    result = {
        "cost_model": str(settings.cost_model),
        "configs": str(settings.configs),
        "rows": rows,
        "summary": summary(rows),
        "wall_s": time.perf_counter() - started,
        "machine_note": settings.model.cost.measured_on,
        "measurements": str(settings.measured) if settings.measured else "live",
    }
    settings.json.parent.mkdir(parents=True, exist_ok=True)
    settings.json.write_text(json.dumps(result, indent=1) + "\n")
    markdown = settings.json.with_suffix(".md")
    figures = result["summary"]
    lines = [table(rows), ""] + [
        f"median absolute error, {name.replace('_', ' ')} ({figures[name]['throughput_rps']['rows']} rows): "
        + ", ".join(summary_cell(f, figures[name][f]) for f in FIGURES)
        for name in ("all", "closed_loop", "batching")
    ]
    markdown.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {settings.json} and {markdown}")
    if settings.plot:
        from tools.simulate.plots import plot_validation

        print(plot_validation(rows, settings.json.with_suffix(".png")))
    return 0
