"""The padding-policy benchmark report in Markdown (`make bench-lengths`)."""

from __future__ import annotations

from tools.loadgen.report import format_ms
from tools.machine import cpu_line


def _row(cells: list) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _latency(row: dict, length_class: str) -> str:
    result = row["per_length_class"].get(length_class)
    if not result or not result["latency"]["count"]:
        return "-"
    return f"{result['latency']['p50_ms']:.0f} / {result['latency']['p99_ms']:.0f}"


def packing_efficiency(row: dict, raw_best: float) -> float | None:
    useful = row.get("useful_tokens_per_s")
    return useful / raw_best if useful is not None and raw_best else None


def _errors(row: dict) -> int:
    return sum(count for outcome, count in row["outcomes"].items() if outcome != "ok")


COLUMNS = (
    "policy",
    "load",
    "req/s",
    "useful tok/s",
    "padding waste",
    "p50 / p99 short ms",
    "p50 / p99 long ms",
    "encoder batch",
    "rows/run",
    "packing eff.",
    "errors",
)


def served_cells(row: dict, raw_best: float) -> list[str]:
    padding = row["padding"]
    return [
        row["policy"],
        row["traffic"],
        f"{row['throughput_rps']:.1f}",
        format_ms(row.get("useful_tokens_per_s"), ".0f"),
        format_ms(padding["waste"], ".0%"),
        _latency(row, "short"),
        _latency(row, "long"),
        format_ms(row["server"]["encoder"]["average_batch_size"], ".2f"),
        format_ms(padding["rows_per_run"], ".2f"),
        format_ms(packing_efficiency(row, raw_best), ".2f"),
        str(_errors(row)),
    ]


def comparison_lines(rows: list[dict]) -> list[str]:
    """Each policy against the first one at the same load: useful tokens/s and p99 per class."""
    if not rows:
        return []
    baseline_policy = rows[0]["policy"]
    baseline = {row["traffic"]: row for row in rows if row["policy"] == baseline_policy}
    lines = []
    for row in rows:
        base = baseline.get(row["traffic"])
        if row["policy"] == baseline_policy or not base or not base.get("useful_tokens_per_s"):
            continue
        ratio = (row.get("useful_tokens_per_s") or 0.0) / base["useful_tokens_per_s"]
        lines.append(
            f"- {row['policy']} vs {baseline_policy} at {row['traffic']}: useful tokens/s x{ratio:.2f}; "
            f"p50/p99 short {_latency(row, 'short')} vs {_latency(base, 'short')} ms, "
            f"long {_latency(row, 'long')} vs {_latency(base, 'long')} ms"
        )
    return lines


def render_markdown(report: dict) -> str:
    s, raw, cpu = report["settings"], report["raw_engine"], report["cpu"]
    best = raw["best_tokens_per_s"]
    busy = cpu.get("load_average") and cpu["load_average"][0] > (cpu.get("cpus") or 1)
    lines = [
        "# Padding policies on mixed-length traffic",
        "",
        cpu_line(cpu) + ".",
        "",
        f"Workload: {s['workload']} (mean {s['mean_tokens']:.0f} tokens per request, unique texts), gRPC, through the `embed` "
        f"ensemble. Closed loop at concurrency {s['concurrency']}"
        + (f" and a Poisson rate of {s['poisson_rate']:g} req/s" if s.get("poisson_rate") else "")
        + f"; {s['warmup_s']:g} s warm-up, then windows of {s['window_s']:g} s until 3 agree within 10% (at most "
        f"{s['max_windows']}). Encoder: max batch {s['encoder']['max_batch_size']}, {s['encoder']['instances']} instance(s). "
        "One server, policies applied by live config reloads, all rows from one run.",
        "",
    ]
    if busy:
        lines += [
            f"The machine was busy (load average {cpu['load_average'][0]:.1f} on {cpu['cpus']} CPUs): absolute figures are "
            "noisy; compare rows within this report only.",
            "",
        ]
    lines += [
        "## Raw engine (in-process ONNX Runtime, the packing ceiling)",
        "",
        "Measured before and after the served runs; the better of the two counts.",
        "",
        _row(["sessions", "batch", "length", "padded tokens/s"]),
        _row(["---", "---:", "---:", "---:"]),
        *[_row([p["layout"], p["batch_size"], p["length"], f"{p['tokens_per_s']:.0f}"]) for p in raw["points"]],
        "",
        f"Best: {best:.0f} padded tokens/s, enough for {best / s['mean_tokens']:.1f} req/s of this mix if no row were padded.",
        "",
        "## Served, side by side",
        "",
        "Padding waste = padding tokens / real tokens the encoder computed (the backend's counters); packing efficiency = "
        "useful tokens/s / the raw engine's best padded tokens/s; encoder batch = requests per Triton execution; rows/run = "
        "rows per ONNX Runtime session run (a ragged execution splits into several runs).",
        "",
        _row(list(COLUMNS)),
        _row(["---", "---", *["---:"] * (len(COLUMNS) - 2)]),
    ]
    lines += [_row(served_cells(row, best)) for row in report["rows"]]
    if any((packing_efficiency(row, best) or 0.0) > 1.0 for row in report["rows"]):
        lines += [
            "",
            "A packing efficiency above 1: the served runs computed more tokens/s than the raw engine's shapes above, "
            "either because they were cheaper per token (small runs of short rows) or because the load from other "
            "processes changed between the measurements.",
        ]
    if s.get("priority_mix"):
        lines += [
            "",
            "## Per priority level",
            "",
            _row(["policy", "load", "level", "req/s", "p50 ms", "p99 ms"]),
            _row(["---", "---", "---:", "---:", "---:", "---:"]),
        ]
        for row in report["rows"]:
            for level, result in row["per_priority"].items():
                latency = result["latency"]
                lines.append(
                    _row(
                        [
                            row["policy"],
                            row["traffic"],
                            level,
                            f"{result['throughput_rps']:.1f}",
                            format_ms(latency["p50_ms"], ".0f"),
                            format_ms(latency["p99_ms"], ".0f"),
                        ]
                    )
                )
    comparisons = comparison_lines(report["rows"])
    if comparisons:
        lines += ["", "## Against the first policy", "", *comparisons]
    lines += ["", f"Benchmark took {report['seconds']:.0f} s.", ""]
    return "\n".join(lines)
