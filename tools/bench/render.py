"""The benchmark report in Markdown: tables first, then the ratios we quote.

A load level with no successful request has no latency (None in the JSON): its cells read
"-" and it takes part in no latency comparison.

Each preset is judged against its twin without dynamic batching, level by level. On a
shared 2-core machine one run drifts ~10% in throughput and more in p99 (a tail of a few
hundred requests), so a level counts as lost only beyond those margins, and the report says
it is one run.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean

from tools.loadgen.report import format_ms
from tools.machine import cpu_summary

THROUGHPUT_MARGIN = 0.10  # a throughput ratio within 1 +- this is a tie
P99_MARGIN = 0.20  # the same for the p99 ratio, the noisier figure


def _row(cells: list) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _errors(result: dict) -> int:
    return sum(v for k, v in result["outcomes"].items() if k != "ok")


def _served_best(results: list[dict]) -> float | None:
    """The best throughput of an error-free level; None when every level had errors."""
    return max((r["throughput_rps"] for r in results if not r["outcomes"].keys() - {"ok"}), default=None)


def _closed_loop_mean(results: list[dict]) -> float:
    closed = [r["throughput_rps"] for r in results if r["traffic"].startswith("concurrency")]
    return sum(closed) / len(closed) if closed else 0.0


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _mean(values: list[float | None]) -> float | None:
    """The mean, or None when any value is missing (a level without latency is not averaged away)."""
    return None if not values or any(v is None for v in values) else mean(values)


@dataclass(frozen=True)
class LevelComparison:
    """A preset against its twin at one load level; with several rounds, means over the rounds
    (each ratio is the mean of the per-round ratios, a preset and its twin measured in turn)."""

    load: str
    rps: float
    twin_rps: float
    p99_ms: float | None
    twin_p99_ms: float | None
    throughput_ratio: float | None
    p99_ratio: float | None
    errors: int
    twin_errors: int
    round_ratios: tuple[float | None, ...] = ()  # throughput ratio of each round, in order

    def ratio_cell(self) -> str:
        """The mean throughput ratio, with each round's when there were several (the spread is the noise)."""
        cell = f"x{format_ms(self.throughput_ratio, '.2f')}"
        if len(self.round_ratios) > 1:
            cell += " (" + ", ".join(format_ms(r, ".2f") for r in self.round_ratios) + ")"
        return cell

    def verdict(self) -> str:
        """beats, ties or loses no batching here; 'unmeasured' when a figure is missing."""
        if self.errors > self.twin_errors:
            return "loses"
        if self.throughput_ratio is None or self.p99_ratio is None:
            return "unmeasured"
        if self.throughput_ratio < 1 - THROUGHPUT_MARGIN or self.p99_ratio > 1 + P99_MARGIN:
            return "loses"
        if self.throughput_ratio > 1 + THROUGHPUT_MARGIN or self.p99_ratio < 1 - P99_MARGIN:
            return "beats"
        return "ties"


def compare_levels(preset: list[dict], twin: list[dict]) -> list[LevelComparison]:
    """Pairs a preset's results with its twin's by load level and round."""
    twins = {(r["traffic"], r.get("round", 1)): r for r in twin}
    levels: dict[str, list[tuple[dict, dict]]] = {}
    for r in preset:
        other = twins.get((r["traffic"], r.get("round", 1)))
        if other is not None:
            levels.setdefault(r["traffic"], []).append((r, other))
    out = []
    for load, pairs in levels.items():
        ratios = [_ratio(a["throughput_rps"], b["throughput_rps"]) for a, b in pairs]
        out.append(
            LevelComparison(
                load,
                mean(a["throughput_rps"] for a, _ in pairs),
                mean(b["throughput_rps"] for _, b in pairs),
                _mean([a["latency"]["p99_ms"] for a, _ in pairs]),
                _mean([b["latency"]["p99_ms"] for _, b in pairs]),
                _mean(ratios),
                _mean([_ratio(a["latency"]["p99_ms"], b["latency"]["p99_ms"]) for a, b in pairs]),
                sum(_errors(a) for a, _ in pairs),
                sum(_errors(b) for _, b in pairs),
                tuple(ratios),
            )
        )
    return out


def verdict_line(preset: str, levels: list[LevelComparison]) -> str:
    """The one line a reader needs: does the preset beat, tie or lose to no batching, and where."""
    if not levels:
        return f"- **{preset}: not measured** (it or its twin failed to load)"
    by: dict[str, list[str]] = {}
    for level in levels:
        by.setdefault(level.verdict(), []).append(level.load)
    if "loses" in by:
        detail = "; ".join(
            f"{lv.load}: throughput {lv.ratio_cell()}, p99 x{format_ms(lv.p99_ratio, '.2f')}"
            + (f", {lv.errors} errors vs {lv.twin_errors}" if lv.errors > lv.twin_errors else "")
            for lv in levels
            if lv.verdict() == "loses"
        )
        return f"- **{preset}: loses to no batching at {', '.join(by['loses'])}** ({detail})"
    if "unmeasured" in by:
        return f"- **{preset}: no verdict**: no latency at {', '.join(by['unmeasured'])}"
    if set(by) == {"beats"}:
        return f"- **{preset}: beats no batching at every level**"
    parts = [f"{word} at {', '.join(by[word])}" for word in ("beats", "ties") if word in by]
    return f"- **{preset}: beats or ties no batching at every level** ({'; '.join(parts)})"


def _preset_section(report: dict) -> list[str]:
    pairs, served = report.get("pairs") or {}, report["served"]
    if not pairs:
        return []
    rounds = report["settings"].get("rounds", 1)
    lines = [
        "",
        "## Each preset against no dynamic batching",
        "",
        "The twin is the preset's own tokenizer and encoder (same instances and threads) without `dynamic_batching`; "
        "the two took turns level by level"
        + (f", {rounds} rounds (figures are means over the rounds; each round's throughput ratio in brackets)." if rounds > 1 else ".")
        + f" A level ties within {THROUGHPUT_MARGIN:.0%} throughput and {P99_MARGIN:.0%} p99 (the drift of one run here).",
        "",
        _row(["preset", "load", "req/s", "no batching req/s", "throughput ratio", "p99 ms", "no batching p99 ms", "p99 ratio", "verdict"]),
        _row(["---", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---"]),
    ]
    verdicts = []
    for preset, names in pairs.items():
        levels = compare_levels(served.get(names["preset"], []), served.get(names["twin"], []))
        for lv in levels:
            lines.append(
                _row(
                    [
                        preset,
                        lv.load,
                        f"{lv.rps:.1f}",
                        f"{lv.twin_rps:.1f}",
                        lv.ratio_cell(),
                        format_ms(lv.p99_ms),
                        format_ms(lv.twin_p99_ms),
                        f"x{format_ms(lv.p99_ratio, '.2f')}",
                        lv.verdict(),
                    ]
                )
            )
        verdicts.append(verdict_line(preset, levels))
    return [*lines, "", *verdicts]


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


def _header(report: dict) -> list[str]:
    s = report["settings"]
    machine = f"Machine: {cpu_summary(report['cpu'])}" if report.get("cpu") else "Machine: not recorded"
    when = f", {report['date']}" if report.get("date") else ""
    return [
        "# Benchmark: dynamic batching on the local Triton",
        "",
        f"{machine}{when}. **One run**: only ratios measured side by side in it carry to other machines.",
        "",
        f"Load: {s.get('target', 'encoder')}, gRPC; raw engine and naive batcher at {s['sequence_length']} tokens per row. "
        f"Closed loop at concurrency {s['concurrency']} and a Poisson "
        f"rate of {s['poisson_rate']:g} req/s; windows of {s['window_s']:g} s until 3 agree within 10% (at most "
        f"{s['max_windows']}). All rows side by side; absolute numbers on a shared 2-core machine drift ~10% between runs.",
    ]


def render_markdown(report: dict) -> str:
    raw = report["raw_engine"]
    best = max(raw, key=lambda p: p["rows_per_s"])
    several = report["settings"].get("rounds", 1) > 1
    lines = [
        *_header(report),
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
            load = f"{r['traffic']} (round {r.get('round', 1)})" if several else r["traffic"]
            batch = r["server"].get("encoder", {}).get("average_batch_size")
            lines.append(
                _row(
                    [
                        name,
                        load,
                        f"{r['throughput_rps']:.1f}",
                        format_ms(r["latency"]["p50_ms"]),
                        format_ms(r["latency"]["p99_ms"]),
                        format_ms(batch, ".2f"),
                        _errors(r),
                    ]
                )
            )
    for r in report["naive_batcher"]:
        lines.append(
            _row(
                [
                    "naive batcher (in-process)",
                    r["label"],
                    f"{r['throughput_rps']:.1f}",
                    format_ms(r["latency"]["p50_ms"]),
                    format_ms(r["latency"]["p99_ms"]),
                    f"{r['average_batch']:.2f}",
                    0,
                ]
            )
        )
    lines += _preset_section(report)

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
        versus_naive = f"; {top / naive_best:.2f} x the naive batcher's best" if naive_best else ""
        lines.append(
            f"- {name}: best served {top:.1f} req/s = {top / best['rows_per_s']:.2f} x the raw engine's best "
            f"({best['rows_per_s']:.0f} rows/s at batch {best['batch_size']}){versus_naive}"
        )
    lines += _winner_vs_model_analyzer(served)
    lines += ["", f"Benchmark took {report['seconds']:.0f} s.", ""]
    return "\n".join(lines)
