"""The benchmark's report as markdown: the rows, and the gateway against every other target."""

from __future__ import annotations

from tools.bench.gateway.client import Row


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def ratio(ours: float | None, theirs: float | None) -> str:
    return f"x{ours / theirs:.2f}" if ours is not None and theirs else "-"


def ratio_lines(rows: list[Row], names: list[str], levels: list[int]) -> list[str]:
    """The first target (the gateway) against each other one, level by level: throughput, and
    p99 (at one connection a stall in the gateway shows in p99 long before it shows in req/s)."""
    by = {(row.target, row.concurrency): row for row in rows}
    lines = []
    for other in names[1:]:
        pairs = [(level, by.get((names[0], level)), by.get((other, level))) for level in levels]
        rps = [f"{ratio(ours.rps, theirs.rps) if ours and theirs else '-'} at {level}" for level, ours, theirs in pairs]
        p99 = [f"{ratio(ours.p99_ms, theirs.p99_ms) if ours and theirs else '-'} at {level}" for level, ours, theirs in pairs]
        lines.append(f"- {names[0]} / {other}, req/s: " + ", ".join(rps))
        lines.append(f"- {names[0]} / {other}, p99: " + ", ".join(p99))
    return lines


def render(report: dict) -> str:
    rows = [Row(**row) for row in report["rows"]]
    cpu = report["cpu"]
    lines = [
        "# Gateway benchmark",
        "",
        f"`python -m tools.bench.gateway` on {report['date']}: {cpu['model']}",
        f"({cpu['cores']} cores; {', '.join(cpu['flags']) or 'no AVX'}),",
        f"load average {report['load_before']} before and {report['load_after']} after. One run; closed loop over HTTP/JSON with",
        f"one aiohttp client sharing the machine with the servers; {report['texts_per_request']} unique mixed text(s) per request;",
        f"{report['warmup_s']:g} s warm-up and {report['seconds']:g} s measured per row; targets interleaved per level.",
        "",
        "| target | concurrency | req/s | p50 ms | p99 ms | max ms | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in sorted(rows, key=lambda r: (report["targets"].index(r.target), r.concurrency)):
        latency = " | ".join(fmt(value) for value in (row.p50_ms, row.p99_ms, row.max_ms))
        lines.append(f"| {row.target} | {row.concurrency} | {row.rps:.1f} | {latency} | {row.errors} |")
    lines += ["", *ratio_lines(rows, report["targets"], report["concurrency"])]
    cosines = ", ".join(f"{name} {value:.6f}" for name, value in report["min_cosine_to_first"].items())
    lines.append(f"- same embeddings: min cosine to the first target's on the sample texts: {cosines}")
    for name, why in report["left_out"].items():
        lines.append(f"- {name}: left out, {why}")
    return "\n".join(lines) + "\n"
