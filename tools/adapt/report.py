"""Figures per phase kind and the Markdown report of one `bench-adapt` run."""

from __future__ import annotations

from collections.abc import Sequence

from tools.adapt.replay import TracePhase, phase_of, slo_figures
from tools.load.driver import Record
from tools.load.results import format_ms


def _share(value: float | None, spec: str = ".1%") -> str:
    return "-" if value is None else format(value, spec)


def _difference(later: float | None, earlier: float | None, scale: float = 1.0) -> float | None:
    return None if later is None or earlier is None else (later - earlier) * scale


def phase_summary(records: Sequence[Record], phases: Sequence[TracePhase], slo_ms: float) -> dict[str, dict]:
    """Per phase kind ('low', 'peak', ...: all phases of that name together) and 'all'."""
    summary = {}
    for name in dict.fromkeys(p.name for p in phases):
        chosen = [r for r in records if phases[phase_of(phases, r.sent_s)].name == name]
        seconds = sum(p.seconds for p in phases if p.name == name)
        summary[name] = slo_figures(chosen, seconds, slo_ms)
    summary["all"] = slo_figures(records, sum(p.seconds for p in phases), slo_ms)
    return summary


def best_static(runs: dict, kind: str) -> str | None:
    """Highest SLO attainment in that phase kind; within 0.5 points, the lower mean latency.
    A config that answered nothing there has no mean latency and is never the best; None
    when no static config answered anything."""
    static = {
        name: run["phases"][kind]
        for name, run in runs.items()
        if run["label"] not in ("adaptive", "repeat") and run["phases"][kind]["mean_ms"] is not None
    }
    if not static:
        return None
    top = max(f["attainment"] for f in static.values())
    close = {name: f for name, f in static.items() if f["attainment"] >= top - 0.005}
    return min(close, key=lambda name: close[name]["mean_ms"])


def drift_lines(runs: dict, kinds: list[str]) -> list[str]:
    """The same static config replayed first and last: how far the machine drifted in between,
    the noise floor for every other difference in the table."""
    lines = []
    for name, run in runs.items():
        if run["label"] != "repeat":
            continue
        first = runs.get(name.removesuffix(" (repeat)"))
        if not first:
            continue
        for k in kinds:
            a, b = first["phases"][k], run["phases"][k]
            points = _difference(b["attainment"], a["attainment"], 100)
            mean = _difference(b["mean_ms"], a["mean_ms"])
            lines.append(
                f"- drift, `{name}` against its first replay, {k}: {format_ms(points, '+.1f')} points, "
                f"{format_ms(mean, '+.1f')} ms mean (the noise floor of this run)"
            )
    return lines


def verdict(runs: dict, kind: str) -> str:
    best = best_static(runs, kind)
    if best is None:
        return f"- **{kind}**: no static config answered a request here; nothing to compare the controller with"
    b, c = runs[best]["phases"][kind], runs["controller"]["phases"][kind]
    d_att = _difference(c["attainment"], b["attainment"], 100)
    d_mean = _difference(c["mean_ms"], b["mean_ms"])
    # a controller that answered nothing has no latency: it cannot match
    matched = d_att is not None and d_mean is not None and d_att >= -1.0 and d_mean <= max(0.10 * b["mean_ms"], 2.0)
    word = "matches" if matched else "does NOT match"
    return (
        f"- **{kind}**: best static is `{best}` ({_share(b['attainment'])} within SLO, mean {format_ms(b['mean_ms'])} ms); "
        f"the controller {word} it ({_share(c['attainment'])}, mean {format_ms(c['mean_ms'])} ms; "
        f"{format_ms(d_att, '+.1f')} points, {format_ms(d_mean, '+.1f')} ms)"
    )


def render_markdown(results: dict) -> str:
    s, runs = results["settings"], results["runs"]
    kinds = list(dict.fromkeys(p["name"] for p in s["phases"]))
    lines = [
        "# Adaptive batching delay vs static configs (`make bench-adapt`)",
        "",
        f"One run (1 replay per config, the first static config twice) of {s['arrivals']} open-loop arrivals: "
        + " -> ".join(f"{p['name']} {p['rate']:g} req/s for {p['seconds']:g} s" for p in s["phases"])
        + f"; encoder, 1 x {s['seq_len']} tokens per request; SLO p99 <= {s['p99_ms']:g} ms. "
        "Attainment = share of the requests sent in the phase answered within the SLO (failures count as misses).",
        "",
        "Every config ran "
        + (
            "with the committed priority levels and queue policies."
            if s.get("priority_queues", True)
            else "without priority levels and queue policies (`--keep-priority-queues` keeps them): with them, Triton 2.51 "
            "sometimes leaves a request sent straight to the encoder waiting ~500 ms at low load, a stall that would "
            'decide this comparison instead of the delay (README, "The priority-queue tax").'
        ),
        "",
        "Batch curve (single requests, server compute per execution): "
        + ", ".join(f"batch {p['batch_size']}: {p['rows_per_s']:.0f} rows/s" for p in results["curve"]),
        "",
        "## Results per phase kind",
        "",
        "| config | "
        + " | ".join(f"{k}: within SLO | {k}: mean ms | {k}: p99 ms | {k}: req/s" for k in kinds)
        + " | all: within SLO | failed |",
        "|---|" + "---:|" * (4 * len(kinds) + 2),
    ]
    for name, run in runs.items():
        cells = []
        for k in kinds:
            f = run["phases"][k]
            cells += [_share(f["attainment"]), format_ms(f["mean_ms"]), format_ms(f["p99_ms"]), f"{f['throughput_rps']:.1f}"]
        a = run["phases"]["all"]
        label = f"{name} ({run['label']})" if run["label"] not in ("static", "repeat") else name
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {_share(a['attainment'])} | {a['failed']} |")
    lines += ["", "## Does the controller match the best static config in every phase?", ""]
    lines += [verdict(runs, k) for k in kinds]
    lines += drift_lines(runs, kinds)
    lines += [
        "",
        "Best static per phase, picked in hindsight from this run: "
        + ", ".join(f"{k}: `{best_static(runs, k) or 'none answered'}`" for k in kinds),
        "",
    ]
    lines += ["## SLO attainment per window", "", "| window start s | " + " | ".join(runs) + " |", "|---:|" + "---:|" * len(runs)]
    for index, first in enumerate(next(iter(runs.values()))["windows"]):
        row = [run["windows"][index] for run in runs.values()]
        cells = [f"{_share(w['attainment'], '.0%')} ({format_ms(w['mean_ms'], '.0f')} ms)" for w in row]
        lines.append(f"| {first['start_s']:.0f} | " + " | ".join(cells) + " |")
    cost = results["reload_cost"]
    lines += [
        "",
        "## What a reload costs in flight",
        "",
        f"Steady load, {len(cost['reload_seconds'])} reloads taking {', '.join(f'{x:.2f}' for x in cost['reload_seconds'])} s; "
        f"failed requests: {cost['failed_total']}.",
        "",
        "| requests | count | failed | mean ms | p50 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key in ("outside_reload", "during_reload"):
        f = cost[key]
        figures = " | ".join(format_ms(f.get(name)) for name in ("mean_ms", "p50_ms", "p99_ms", "max_ms"))
        lines.append(f"| {key.replace('_', ' ')} | {f['requests']} | {f['failed']} | {figures} |")
    control = results["controller"]
    lines += ["", "## The controller's changes", ""]
    changes = [d for d in control["decisions"] if d["changed"]]
    for d in changes:
        figures = ", ".join(f"{k} {v}" for k, v in d["figures"].items() if v is not None)
        lines.append(f"- {d['at_s']:.1f} s: {d['before_us']} -> {d['after_us']} us: {d['reason']} ({figures})")
    if not changes:
        lines.append("- none")
    for r in control["reloads"]:
        if not r["ok"]:
            lines.append(f"- reload to {r['after_us']} us FAILED after {r['seconds']:.1f} s (kept {r['before_us']} us): {r['error']}")
    lines.append(f"\nReloads: {len(control['reloads'])}, {sum(r['seconds'] for r in control['reloads']):.1f} s in total.")
    return "\n".join(lines) + "\n"
