"""`calibrate`: measure the cost model on a server.

The encoder is loaded live with each instance count asked for (threads shared out as
the tuner writes them, tools/repo/instances.py) and sent one request of b rows x L tokens
at a time, so nothing queues: Triton's statistics then give one execution's time
(compute input + infer + output). The tokenizer is sent b texts per request the same
way. The per-request costs outside both steps (frontend, ensemble hand-off, response)
are the client's mean latency through `embed` at one client minus the steps' queue and
compute times from the statistics. The server's config is loaded back at the end.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import logging
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from tools.machine import cpu_description
from tools.repo.instances import with_instances
from tools.serve.admin_key import resolve_admin_key
from tools.simulate.cost_model import CostModel, Grid, Overheads, StepCost
from tools.simulate.live_load import SAMPLE_TEXTS, Traffic, measure, sample_lengths, token_tensors
from tools.triton_client import TritonError
from tools.triton_client.stats import ModelStats

log = logging.getLogger("simulate")

HANDOFF_MS = 0.1  # ensemble hand-off between steps: not separable in Triton's statistics; a small fixed share


def positive_ints(text: str, option: str) -> list[int]:
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ValueError(f"{option} must be a comma list of whole numbers, got {text!r}") from None
    if not values or values[0] < 1:
        raise ValueError(f"{option} must list positive whole numbers, got {text!r}")
    return values


def execution_ms(client, http_url: str, model: str, inputs: list, repeats: int) -> tuple[float, list[float]]:
    """Server time per execution and the client's per-call times. Triton's statistics give
    the mean (compute input + infer + output); on a shared machine one call held up by other
    work drags a mean of a few, so the client's median (which adds only the transport, well
    under a millisecond here) is taken when it is lower."""
    client.infer(model, inputs)  # a new shape may pay one-time costs
    before = ModelStats.settled(http_url, model)
    calls = []
    for _ in range(repeats):
        started = time.perf_counter()
        client.infer(model, inputs)
        calls.append((time.perf_counter() - started) * 1000.0)
    delta = ModelStats.settled(http_url, model) - before
    median = float(np.median(calls))
    if delta.requests != repeats or delta.compute_ns <= 0:
        log.warning("%s: the statistics counted %d of %d calls; using the client's median time", model, delta.requests, repeats)
        return median, calls
    return min(median, delta.compute_ns / delta.requests / 1e6), calls


def noise_quantiles(residuals: list[float]) -> list[float]:
    """Eleven evenly spaced quantiles of the relative residuals, the outer 5% on each side
    clipped first: calls held up several-fold by other work on a shared machine (bursts of
    it, not execution noise) would otherwise make a tenth of the simulated executions that
    slow; on this machine they were 3% of calls at up to 16x the median."""
    values = np.asarray(residuals, dtype=float)
    low, high = np.quantile(values, [0.05, 0.95])
    return [float(q) for q in np.quantile(np.clip(values, low, high), np.linspace(0, 1, 11))]


def smooth(batches: list[int], lengths: list[int], table: list[list[float]], mask: list[list[bool]]) -> tuple[list[list[float]], dict]:
    """The table's values from a least-squares fit of `a + b*rows + c*rows*length +
    d*rows*length^2` (every term >= 0, errors relative to the reading) over the points run,
    leaving out once the points more than 50% off the first fit. On a shared machine single
    readings jump several-fold when other work runs; the fitted surface keeps the shape
    (per-execution, per-row, per-token and attention's quadratic cost) without the jumps."""
    points = [(b, length, table[i][j]) for i, b in enumerate(batches) for j, length in enumerate(lengths) if mask[i][j]]
    rows = np.array([p[0] for p in points], dtype=float)
    tokens = np.array([p[1] for p in points], dtype=float)
    ms = np.array([p[2] for p in points], dtype=float)
    columns = np.stack([np.ones_like(rows), rows, rows * tokens, rows * tokens**2], axis=1)
    keep = np.ones(len(ms), dtype=bool)
    terms = np.zeros(4)
    for _ in range(2):
        best = None
        weights = 1.0 / ms[keep]
        for size in (4, 3, 2, 1):
            for subset in itertools.combinations(range(4), size):
                a = columns[keep][:, subset] * weights[:, None]
                coefficients, *_ = np.linalg.lstsq(a, ms[keep] * weights, rcond=None)
                if (coefficients < 0).any():
                    continue
                residual = float(np.sum((a @ coefficients - ms[keep] * weights) ** 2))
                if best is None or residual < best[0] - 1e-12:
                    best = (residual, subset, coefficients)
        if best is None:
            return table, {"fit": "none (no non-negative fit)"}
        terms = np.zeros(4)
        terms[list(best[1])] = best[2]
        relative = columns @ terms / ms - 1.0
        keep = np.abs(relative) <= 0.5
        if keep.sum() < 4:
            keep = np.ones(len(ms), dtype=bool)
    fitted = [[float(max(1e-3, terms @ [1.0, b, b * length, b * length**2])) for length in lengths] for b in batches]
    left_out = [[int(r), int(t)] for r, t, k in zip(rows, tokens, keep) if not k]
    return fitted, {
        "terms_ms": dict(zip(("per_execution", "per_row", "per_token", "per_token_pair"), map(float, terms))),
        "left_out_points": left_out,
        "raw_execution_ms": table,
    }


def measure_encoder(
    client, http_url: str, batches: list[int], lengths: list[int], max_tokens: int, repeats: int, residuals: list[float]
) -> tuple[Grid, list[list[bool]], dict]:
    """The fitted table (see `smooth`), which points were run (points above `max_tokens`
    are not: the fit gives them) and the fit's terms with the raw readings."""
    rng = np.random.default_rng(0)
    table = [[0.0] * len(lengths) for _ in batches]
    measured = [[False] * len(lengths) for _ in batches]
    for j, length in enumerate(lengths):
        for i, batch in enumerate(batches):
            if batch * length > max_tokens and i > 0:
                continue
            ids = rng.integers(1000, 30_000, size=(batch, length), dtype=np.int64)
            ms, calls = execution_ms(client, http_url, "encoder", token_tensors(httpclient, ids), repeats)
            table[i][j], measured[i][j] = ms, True
            median = float(np.median(calls))
            residuals.extend(c / median - 1.0 for c in calls)
            log.info("encoder: batch %2d x %3d tokens -> %.2f ms per execution", batch, length, ms)
        last = max(i for i in range(len(batches)) if measured[i][j])
        for i in range(last + 1, len(batches)):
            table[i][j] = table[last][j] * batches[i] / batches[last]
    fitted, fit = smooth(batches, lengths, table, measured)
    return Grid(batches, lengths, fitted), measured, fit


def measure_tokenizer(client, http_url: str, batches: list[int], repeats: int) -> Grid:
    length = round(float(np.mean(sample_lengths())))
    table = []
    for batch in batches:
        texts = np.array([[f"{SAMPLE_TEXTS[k % len(SAMPLE_TEXTS)]} #calibrate-{k}".encode()] for k in range(batch)], dtype=np.object_)
        tensor = httpclient.InferInput("TEXT", list(texts.shape), "BYTES")
        tensor.set_data_from_numpy(texts)
        ms, _ = execution_ms(client, http_url, "tokenizer", [tensor], repeats)
        table.append([ms])
        log.info("tokenizer: batch %2d -> %.2f ms per execution", batch, ms)
    fitted, _ = smooth(batches, [length], table, [[True] for _ in batches])
    return Grid(batches, [length], fitted)


def measure_overheads(endpoints) -> tuple[Overheads, dict]:
    figures = measure(endpoints.http_url, endpoints.grpc_url, Traffic(concurrency=1))
    steps_ms = sum((figures.server_ms or {}).get(m, {}).get(k) or 0.0 for m in ("tokenizer", "encoder") for k in ("queue", "compute"))
    if figures.mean_ms is None:
        raise RuntimeError("no request through embed succeeded while measuring the per-request overheads")
    outside = max(0.0, figures.mean_ms - steps_ms - HANDOFF_MS)
    # One client sends its next request when the last returns: the time between requests
    # beyond the latency is the load generator's own time per request.
    client = max(0.0, 1000.0 / figures.throughput_rps - figures.mean_ms) if figures.throughput_rps > 0 else 0.0
    log.info(
        "embed at 1 client: mean %.2f ms, steps %.2f ms -> %.2f ms per request outside them, %.2f ms in the client between requests",
        figures.mean_ms,
        steps_ms,
        outside,
        client,
    )
    overheads = Overheads(outside / 2, HANDOFF_MS, outside / 2, 0.3, client)
    return overheads, {
        "client_mean_ms": figures.mean_ms,
        "throughput_rps": figures.throughput_rps,
        "steps_ms": steps_ms,
        "server_ms": figures.server_ms,
    }


def software(http_url: str) -> dict:
    versions = {"python": platform.python_version()}
    try:
        client = httpclient.InferenceServerClient(http_url)
        versions["triton"] = client.get_server_metadata().get("version")
        client.close()
    except Exception as exc:  # metadata is informative only
        log.warning("could not read the server's version: %s", exc)
    for package in ("onnxruntime", "tritonclient", "numpy"):
        try:
            from importlib.metadata import version

            versions[package] = version(package)
        except Exception:
            versions[package] = None
    return versions


def calibrate(endpoints, batches: list[int], lengths: list[int], instances: list[int], max_tokens: int, repeats: int) -> CostModel:
    control = endpoints.client
    base = control.config("encoder")
    try:
        control.load("encoder", base)
    except TritonError as exc:
        if exc.reloads_refused:
            raise ValueError(
                f"the server at {endpoints.http_url} is not in explicit model-control mode; start it with --model-control-mode explicit"
            ) from None
        raise
    client = httpclient.InferenceServerClient(endpoints.http_url, network_timeout=300.0)
    residuals: list[float] = []
    grids, masks, fits = {}, {}, {}
    try:
        with control.restoring("encoder", base):
            for count in instances:
                control.load("encoder", with_instances(base, count))
                log.info("encoder with %d instance(s)", count)
                grids[count], masks[count], fits[count] = measure_encoder(
                    client, endpoints.http_url, batches, lengths, max_tokens, repeats, residuals
                )
        tokenizer = measure_tokenizer(client, endpoints.http_url, [b for b in batches if b <= 32] or [1], repeats)
    finally:
        client.close()
    overheads, overhead_figures = measure_overheads(endpoints)
    quantiles = noise_quantiles(residuals) if residuals else [0.0]
    return CostModel(
        steps={"encoder": StepCost(grids), "tokenizer": StepCost({1: tokenizer})},
        overheads=overheads,
        noise_quantiles=sorted(quantiles),
        kind="measured",
        measured_on={
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu": cpu_description(),
            "software": software(endpoints.http_url),
            "encoder_config": {"threads_per_instance": "cores / instances (tools/repo/instances.py)", "instances": instances},
        },
        extra={
            "measured_points": {str(n): mask for n, mask in masks.items()},
            "fits": {str(n): f for n, f in fits.items()},
            "overheads": overhead_figures,
            "repeats": repeats,
        },
    )


@dataclass(frozen=True)
class CalibrateSettings:
    """`calibrate`'s options (tools/simulate/__main__.py declares them) as typed values, checked."""

    out: Path
    batch_sizes: list[int]
    seq_lengths: list[int]
    instances: list[int]
    max_tokens: int  # points with batch x length above it are skipped
    repeats: int  # executions per point
    url: str | None = None  # a running server in explicit model-control mode, or None to start one
    grpc_url: str | None = None
    admin_key: str | None = None
    plot: bool = True

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> CalibrateSettings:
        if args.repeats < 1 or args.max_tokens < 1:
            raise ValueError("--repeats and --max-tokens must be at least 1")
        return cls(
            out=args.out,
            batch_sizes=positive_ints(args.batch_sizes, "--batch-sizes"),
            seq_lengths=positive_ints(args.seq_lengths, "--lengths"),
            instances=positive_ints(args.instances, "--instances"),
            max_tokens=args.max_tokens,
            repeats=args.repeats,
            url=args.url,
            grpc_url=args.grpc_url,
            admin_key=resolve_admin_key(args.admin_key_file, args.admin_key),
            plot=not args.no_plot,
        )


def run_calibrate(settings: CalibrateSettings) -> int:
    from tools.serve.server_session import triton_endpoints

    started = time.perf_counter()
    with triton_endpoints(settings.url, settings.grpc_url, explicit_control=True, admin_key=settings.admin_key) as endpoints:
        model = calibrate(endpoints, settings.batch_sizes, settings.seq_lengths, settings.instances, settings.max_tokens, settings.repeats)
    model.save(settings.out)
    print(f"wrote the cost model to {settings.out} ({time.perf_counter() - started:.0f} s)")
    if settings.plot:
        from tools.simulate.plots import plot_cost_model

        print(plot_cost_model(model, settings.out.with_suffix(".png")))
    return 0
