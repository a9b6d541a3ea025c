"""Text tables for predictions and validations."""

from __future__ import annotations

from tools.simulate.predict import Prediction


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def prediction_table(p: Prediction, title: str) -> str:
    lines = [
        f"prediction: {title}",
        f"  throughput {p.throughput_rps:.1f} req/s, p50 {ms(p.p50_ms)} ms, p90 {ms(p.p90_ms)} ms, p99 {ms(p.p99_ms)} ms",
        f"  executed batch: encoder {ms(p.avg_batch)}, tokenizer {ms(p.tokenizer_avg_batch)}; "
        f"rejected (queue full) {p.rejected}, queue timeouts {p.timeouts} of {p.sent}",
        "  encoder batch sizes: " + ", ".join(f"{size}x{count}" for size, count in sorted(p.batch_histogram.items())),
    ]
    if len(p.per_priority) > 1 or any(level for level in p.per_priority):
        lines.append("  priority | sent | ok | rejected | timeouts | req/s | p50 ms | p90 ms | p99 ms")
        for level, c in sorted(p.per_priority.items()):
            name = str(level) if level else "default"
            lines.append(
                f"  {name:>8} | {c.sent} | {c.ok} | {c.rejected} | {c.timeouts} | {c.throughput_rps:.1f} | "
                f"{ms(c.p50_ms)} | {ms(c.p90_ms)} | {ms(c.p99_ms)}"
            )
    return "\n".join(lines)
