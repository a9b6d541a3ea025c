"""The benchmark report in Markdown: tables first, then the ratios we quote.

A load level with no successful request has no latency (None in the JSON): its cells read
"-" and it takes part in no latency comparison.
"""

from __future__ import annotations

from tools.loadgen.report import format_ms


def _row(cells: list) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _served_best(results: list[dict]) -> float | None:
    """The best throughput of an error-free level; None when every level had errors."""
    return max((r["throughput_rps"] for r in results if not r["outcomes"].keys() - {"ok"}), default=None)


def _closed_loop_mean(results: list[dict]) -> float:
    closed = [r["throughput_rps"] for r in results if r["traffic"].startswith("concurrency")]
    return sum(closed) / len(closed) if closed else 0.0


def _winner_vs_model_analyzer(served: dict[str, list[dict]]) -> list[str]:
    """The tuner's pick against Model Analyzer's under the same load, level by level and by
    the tuner's objective (mean throughput over the closed-loop levels)."""
    winner, analyzer = served.get("tuner winner"), served.get("Model Analyzer pick")
    if not winner or not analyzer:
        return []
    lines = [
        f"- tuner winner vs Model Analyzer pick, mean over the closed-loop levels: {_closed_loop_mean(winner):.1f} vs "
        f"{_closed_loop_mean(analyzer):.1f} req/s"
    ]
    for a, b in zip(analyzer, winner):
        if a["throughput_rps"]:
            lines.append(
                f"- tuner winner vs Model Analyzer pick at {b['traffic']}: throughput x{b['throughput_rps'] / a['throughput_rps']:.2f}, "
                f"p99 {format_ms(b['latency']['p99_ms'])} vs {format_ms(a['latency']['p99_ms'])} ms"
            )
    return lines


def render_markdown(report: dict) -> str:
    s = report["settings"]
    raw = report["raw_engine"]
    best = max(raw, key=lambda p: p["rows_per_s"])
    lines = [
        "# Benchmark: dynamic batching on the local Triton",
        "",
        f"Load: {s.get('target', 'encoder')}, gRPC; raw engine and naive batcher at {s['sequence_length']} tokens per row. "
        f"Closed loop at concurrency {s['concurrency']} and a Poisson "
        f"rate of {s['poisson_rate']:g} req/s; windows of {s['window_s']:g} s until 3 agree within 10% (at most "
        f"{s['max_windows']}). One run, all rows side by side; absolute numbers on a shared 2-core machine drift ~10% between runs.",
        "",
        "## Raw engine (in-process ONNX Runtime, the ceiling)",
        "",
        _row(["batch size", "rows/s", "ms per batch"]),
        _row(["---:"] * 3),
        *[_row([p["batch_size"], f"{p['rows_per_s']:.0f}", f"{p['execution_ms']:.1f}"]) for p in raw],
        "",
        "## Served by Triton (gRPC, live config reloads) and the naive in-process batcher",
        "",
        _row(["config", "load", "req/s", "p50 ms", "p99 ms", "avg executed batch", "errors"]),
        _row(["---", "---", "---:", "---:", "---:", "---:", "---:"]),
    ]
    for name, results in report["served"].items():
        for r in results:
            errors = sum(v for k, v in r["outcomes"].items() if k != "ok")
            batch = r["server"].get("encoder", {}).get("average_batch_size")
            lines.append(_row([name, r["traffic"], f"{r['throughput_rps']:.1f}", format_ms(r["latency"]["p50_ms"]),
                               format_ms(r["latency"]["p99_ms"]), format_ms(batch, ".2f"), errors]))  # fmt: skip
    for r in report["naive_batcher"]:
        lines.append(_row(["naive batcher (in-process)", r["label"], f"{r['throughput_rps']:.1f}", format_ms(r["latency"]["p50_ms"]),
                           format_ms(r["latency"]["p99_ms"]), f"{r['average_batch']:.2f}", 0]))  # fmt: skip

    lines += ["", "## Ratios", ""]
    served = report["served"]
    naive_best = max((r["throughput_rps"] for r in report["naive_batcher"]), default=0.0)
    for name, results in served.items():
        if not results:
            lines.append(f"- {name}: failed to load")
            continue
        top = _served_best(results)
        if top is None:
            lines.append(f"- {name}: errors at every load level, no error-free throughput to compare")
            continue
        lines.append(
            f"- {name}: best served {top:.1f} req/s = {top / best['rows_per_s']:.2f} x the raw engine's best "
            f"({best['rows_per_s']:.0f} rows/s at batch {best['batch_size']}); {top / naive_best:.2f} x the naive batcher's best"
            if naive_best
            else f"- {name}: best served {top:.1f} req/s"
        )
    if "no dynamic batching" in served and "committed config" in served and served["committed config"]:
        plain, dynamic = served["no dynamic batching"], served["committed config"]
        for a, b in zip(plain, dynamic):
            if a["throughput_rps"]:
                lines.append(
                    f"- dynamic vs no batching at {b['traffic']}: throughput x{b['throughput_rps'] / a['throughput_rps']:.2f}, "
                    f"p99 {format_ms(b['latency']['p99_ms'])} vs {format_ms(a['latency']['p99_ms'])} ms"
                )
    lines += _winner_vs_model_analyzer(served)
    lines += ["", f"Benchmark took {report['seconds']:.0f} s.", ""]
    return "\n".join(lines)
