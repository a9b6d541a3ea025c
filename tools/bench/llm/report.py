"""reports/bench-llm/: the run as JSON (every figure), Markdown (the tables and the
comparisons the benchmark targets) and a PNG (goodput and p99 TTFT against offered load,
one line per target; closed loop and Poisson on their own axes).

The report document: {"date", "cpu", "workload", "slo", "settings", "runs", "targets":
[{"name", "description", "protocol"}], "levels": [{"target", "kind", "load", "label",
...LevelFigures}]}; kind is "closed" (load = streams) or "poisson" (load = req/s).
"""

from __future__ import annotations

import json
from pathlib import Path

from tools.load.results import format_ms
from tools.machine import cpu_summary

COLUMNS = (
    ("out tok/s", "output_tokens_per_s", ".1f"),
    ("goodput req/s", "goodput_rps", ".3f"),
    ("good %", "good_share", ".0%"),
    ("TTFT p50 ms", "ttft_p50_ms", ".0f"),
    ("TTFT p99 ms", "ttft_p99_ms", ".0f"),
    ("TPOT p50 ms", "tpot_p50_ms", ".1f"),
    ("TPOT p99 ms", "tpot_p99_ms", ".1f"),
    ("ITL p99 ms", "itl_p99_ms", ".1f"),
    ("done/sent", None, ""),
    ("load avg", "load_average", ".1f"),
    ("cut", None, ""),
)


def _cell(level: dict, key: str | None, spec: str, header: str) -> str:
    if header == "done/sent":
        return f"{level['completed']}/{level['requests']}"
    if header == "cut":
        failed = level["requests"] - level["completed"]
        return str(failed) if failed else ""
    return format_ms(level.get(key), spec)


def table(levels: list[dict]) -> list[str]:
    """One row per level; with several rounds (bench-llm --rounds) each figure is their median and
    a last column gives every round's output tokens/s."""
    by_round = any(len(level.get("rounds", ())) > 1 for level in levels)
    headers = ["load", "target", *(name for name, _, _ in COLUMNS), *(["out tok/s by round"] if by_round else [])]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for level in levels:
        cells = [level["label"], level["target"], *(_cell(level, key, spec, name) for name, key, spec in COLUMNS)]
        if by_round:
            cells.append(", ".join(f"{value:.1f}" for value in level.get("rounds", [level["output_tokens_per_s"]])))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


ITERATION = "llm iteration"  # our served target's name, before any variant label


def find(levels: list[dict], target: str, kind: str, load: float) -> dict | None:
    return next((lv for lv in levels if lv["target"] == target and lv["kind"] == kind and lv["load"] == load), None)


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "-"
    if b == 0:
        return "inf" if a > 0 else "-"
    return f"{a / b:.2f}x"


def _tokens_ratio(a: dict, b: dict) -> str:
    """a's output tokens/s over b's; with rounds (bench-llm --rounds), each round's ratio after it."""
    ratio = _ratio(a["output_tokens_per_s"], b["output_tokens_per_s"])
    mine, theirs = a.get("rounds", []), b.get("rounds", [])
    if len(mine) > 1 and len(mine) == len(theirs):
        ratio += " (by round: " + ", ".join(_ratio(x, y) for x, y in zip(mine, theirs)) + ")"
    return ratio


def variant_suffixes(levels: list[dict]) -> list[str]:
    """' [LABEL]' of each of our engine's knob variants in the run (bench-llm --set LABEL:...), or
    '' for the one unlabelled set: our targets' names carry it."""
    suffixes = {lv["target"][len(ITERATION) :] for lv in levels if lv["target"].startswith(ITERATION)}
    return sorted(suffixes)


def comparisons(levels: list[dict]) -> list[str]:
    """The benchmark's targets (docs/llm.md), stated as measured (levels that did not run are left
    out), once per variant of our engine's knobs."""
    lines = []
    for suffix in variant_suffixes(levels) or [""]:
        lines += _comparisons(levels, suffix)
    return lines


def _comparisons(levels: list[dict], suffix: str) -> list[str]:
    ours = f"iteration{suffix}"
    lines = []
    for streams in (16, 32):
        it, req, none, llama = (
            find(levels, name, "closed", streams)
            for name in (ITERATION + suffix, "llm request" + suffix, "llm none" + suffix, "llama-server")
        )
        if it and req:
            goodput = f"iteration's goodput is {_ratio(it['goodput_rps'], req['goodput_rps'])} request's"
            if none:
                goodput += f" and {_ratio(it['goodput_rps'], none['goodput_rps'])} none's"
            ttft = f"request's TTFT p99 is {_ratio(req['ttft_p99_ms'], it['ttft_p99_ms'])} iteration's"
            lines.append(
                f"- {streams} streams{suffix}: {goodput}; {ttft} (target: goodput >= 3x request and >= 5x none, TTFT p99 3x lower)"
            )
        if it and llama:
            tokens = _tokens_ratio(it, llama)
            lines.append(f"- {streams} streams: {ours}'s output tokens/s are {tokens} llama-server's (target: >= 1x)")
    for streams in sorted({lv["load"] for lv in levels if lv["kind"] == "closed"}):
        inside, alone, native = (find(levels, name, "closed", streams) for name in ("vllm", "vllm-server", ITERATION + suffix))
        label = (inside or alone or native or {}).get("label", f"{streams:g} streams")
        if inside and alone and not suffix:
            tokens = _tokens_ratio(inside, alone)
            ttft = _ratio(inside["ttft_p99_ms"], alone["ttft_p99_ms"])
            lines.append(
                f"- {label}: vLLM inside Triton's output tokens/s are {tokens} vLLM's own server's, its TTFT p99 {ttft} "
                "(what the Triton path costs; target at 16 streams: >= 0.9x)"
            )
        goal = " (target at 16 and 32 streams: >= 1.2x)" if streams in (16, 32) else ""
        if native and inside:
            tokens = _tokens_ratio(native, inside)
            lines.append(f"- {label}: our engine's ({ours}) output tokens/s are {tokens} vLLM's inside Triton{goal}")
        if native and alone:
            tokens = _tokens_ratio(native, alone)
            lines.append(f"- {label}: our engine's ({ours}) output tokens/s are {tokens} vLLM's own server's{goal}")
        in_process = find(levels, "engine-loop" + suffix, "closed", streams)
        if native and in_process:
            tokens = _tokens_ratio(native, in_process)
            lines.append(
                f"- {label}: our engine served through Triton ({ours}) gives {tokens} the output tokens/s of the same engine "
                f"in process (engine-loop{suffix}; what the Triton path costs it; target at 1 and 16 streams: >= 0.9x)"
            )
    it, llama = find(levels, ITERATION + suffix, "closed", 1), find(levels, "llama-server", "closed", 1)
    if it and llama:
        tokens, tpot = _tokens_ratio(it, llama), _ratio(it["tpot_p50_ms"], llama["tpot_p50_ms"])
        lines.append(f"- 1 stream: {ours}'s output tokens/s are {tokens} llama-server's, its TPOT p50 {tpot} theirs (target: <= 1x)")
    return lines


def render_markdown(report: dict) -> str:
    levels = report["levels"]
    settings = report["settings"]
    lines = [
        "# bench-llm: the LLM engines on Triton and beside it under one seeded streaming load",
        "",
        f"- Date: {report['date']}; {_runs(report['runs'])}",
        f"- CPU: {cpu_summary(report['cpu'])}; load average at the start: {report.get('load_average', '-')}",
        f"- Workload: {report['workload']['description']}; mean prompt {report['workload']['mean_prompt_tokens']:.0f} tokens, "
        f"mean output {report['workload']['mean_output_tokens']:.0f} tokens; the same requests for every target",
        f"- Load: closed loop at {', '.join(str(c) for c in settings['concurrency']) or '-'} streams, Poisson at "
        f"{', '.join(f'{r:g}' for r in settings['rates']) or '-'} req/s; {_warmup(settings)}{settings['seconds']:g} s of scored sending "
        f"per level, then at most {settings['drain_s']:g} s of drain (requests still streaming then are cut, and count as not good)",
        f"- SLO: {report['slo']} (DistServe's goodput: a request counts when it met every objective); "
        "throughput and goodput divide by the scored window (its start to the last answer)",
        *(
            f"- Appended: {', '.join(part['targets'])} measured in {part.get('note', 'a second invocation')} at {part['date']} "
            f"(same requests, same plan; load average at its start: {part['load_average']})"
            for part in report.get("appended", [])
        ),
        "",
        "## Targets",
        "",
        *(f"- **{t['name']}**: {t['description']}; client: {t['protocol']}" for t in report["targets"]),
        "",
    ]
    for kind, title in (("closed", "Closed loop (concurrent streams)"), ("poisson", "Open loop (Poisson arrivals)")):
        order = {name: index for index, name in enumerate(dict.fromkeys(lv["target"] for lv in levels))}
        rows = sorted((lv for lv in levels if lv["kind"] == kind), key=lambda lv: (lv["load"], order[lv["target"]]))
        if rows:
            lines += [f"## {title}", "", *table(rows), ""]
    compared = comparisons(levels)
    if compared:
        lines += ["## Against the targets", "", *compared, ""]
    failures = [lv for lv in levels if lv["requests"] > lv["completed"]]
    if failures:
        lines += ["## Requests that did not complete", ""]
        lines += [
            f"- {lv['label']}, {lv['target']}: {lv['outcomes']}" + (f" ({lv['first_error']})" if lv.get("first_error") else "")
            for lv in failures
        ]
        lines.append("")
    lines += ["![goodput and p99 TTFT against offered load](bench-llm.png)", ""]
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    """Goodput and p99 TTFT against offered load, per target (closed loop and Poisson apart)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [k for k in ("closed", "poisson") if any(lv["kind"] == k for lv in report["levels"])]
    fig, axes = plt.subplots(max(len(kinds), 1), 2, figsize=(11, 4 * max(len(kinds), 1)), squeeze=False)
    slo_ms = report["slo_ttft_s"] * 1000.0
    for row, kind in enumerate(kinds):
        xlabel = "concurrent streams" if kind == "closed" else "offered load, Poisson (req/s)"
        any_ttft = False
        for target in dict.fromkeys(lv["target"] for lv in report["levels"]):
            points = sorted((lv["load"], lv) for lv in report["levels"] if lv["target"] == target and lv["kind"] == kind)
            if not points:
                continue
            x = [load for load, _ in points]
            axes[row][0].plot(x, [lv["goodput_rps"] for _, lv in points], marker="o", label=target)
            ttft = [(load, lv["ttft_p99_ms"]) for load, lv in points if lv["ttft_p99_ms"] is not None]
            axes[row][1].plot([p[0] for p in ttft], [p[1] for p in ttft], marker="o", label=target)
            any_ttft = any_ttft or bool(ttft)
        axes[row][0].set(xlabel=xlabel, ylabel="goodput (req/s meeting the SLO)", title=f"goodput, {kind}")
        axes[row][1].set(xlabel=xlabel, ylabel="TTFT p99 (ms)", title=f"TTFT p99, {kind}", yscale="log" if any_ttft else "linear")
        axes[row][1].axhline(slo_ms, color="grey", linestyle="--", linewidth=1, label="SLO")
        if not any_ttft:
            axes[row][1].text(0.5, 0.5, "no request answered", ha="center", transform=axes[row][1].transAxes)
        for axis in axes[row] if any_ttft else axes[row][:1]:  # a log axis needs a point on it
            axis.grid(True, alpha=0.3)
            axis.legend(fontsize=8)
            if kind == "closed":
                axis.set_xscale("log", base=2)
    fig.suptitle(f"bench-llm, {cpu_summary(report['cpu'])}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(report: dict, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "bench-llm.json", folder / "bench-llm.md", folder / "bench-llm.png"]
    paths[0].write_text(json.dumps(report, indent=2) + "\n")
    paths[1].write_text(render_markdown(report))
    plot(report, paths[2])
    return paths


def _runs(rounds: int) -> str:
    if rounds <= 1:
        return "runs: 1 (one pass per target, targets one after another)"
    return (
        f"runs: {rounds} rounds (every target in each, in turn, the order reversed every other round); "
        "each figure is the median of the rounds' (of two: their mean)"
    )


def _warmup(settings: dict) -> str:
    warmup = settings.get("warmup_s", 0.0)
    return f"{warmup:g} s of warm-up (the same load, served, not scored), then " if warmup else ""
