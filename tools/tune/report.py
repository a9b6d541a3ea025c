"""What a sweep leaves behind: every trial as CSV and JSON, plots, and the winner's config."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

from tools.tune.session import Trial

log = logging.getLogger("tune")

CSV_FIELDS = (
    "key",
    "max_batch_size",
    "preferred",
    "delay_us",
    "instances",
    "priority_queues",
    "runs",
    "feasible",
    "score_throughput_rps",
    "score_p99_ms",
    "traffic",
    "throughput_rps",
    "p50_ms",
    "p99_ms",
    "errors",
    "avg_batch",
    "queue_ms",
    "compute_ms",
    "error",
)


SERVER_CONFIG = "server-config.pbtxt"  # in the report folder: the config the server ran before the sweep
CHECKPOINT = "checkpoint.json"


def write_trials(trials: list[Trial], folder: Path, model: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trials.json").write_text(json.dumps([t.to_dict() for t in trials], indent=1))
    with open(folder / "trials.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, CSV_FIELDS)
        writer.writeheader()
        for trial in trials:
            c = trial.candidate
            common = {
                "key": c.key,
                "max_batch_size": c.max_batch_size,
                "preferred": " ".join(map(str, c.preferred)),
                "delay_us": c.delay_us,
                "instances": c.instances,
                "priority_queues": c.priority_queues,
                "runs": trial.runs,
                "feasible": trial.score.feasible,
                "score_throughput_rps": round(trial.score.throughput_rps, 2),
                "score_p99_ms": _round(trial.score.p99_ms),
                "error": trial.error,
            }
            for result in trial.results or [{}]:
                server = result.get("server", {}).get(model, {})
                writer.writerow(
                    common
                    | {
                        "traffic": result.get("traffic", ""),
                        "throughput_rps": round(result.get("throughput_rps", 0.0), 2),
                        "p50_ms": _round(result.get("latency", {}).get("p50_ms")),
                        "p99_ms": _round(result.get("latency", {}).get("p99_ms")),
                        "errors": sum(v for k, v in result.get("outcomes", {}).items() if k != "ok"),
                        "avg_batch": _round(server.get("average_batch_size")),
                        "queue_ms": _round(server.get("average_queue_ms")),
                        "compute_ms": _round(server.get("average_compute_ms")),
                    }
                )


def _round(value: float | None) -> float | None:
    """A figure for the CSV; None (an empty cell) where there was nothing to measure."""
    return None if value is None else round(value, 2)


def plot_trials(trials: list[Trial], winner: Trial | None, folder: Path, model: str, p99_ms: float) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    figure, axis = plt.subplots(figsize=(9, 6))
    for trial in trials:
        if not trial.results:
            continue
        # a level without successful requests has no p99 (None): it has no point on the plot
        points = [(r["throughput_rps"], r["latency"]["p99_ms"]) for r in trial.results if r["latency"]["p99_ms"] is not None]
        throughput, p99 = [x for x, _ in points], [y for _, y in points]
        style = {"linewidth": 2.5, "color": "black"} if trial is winner else {"alpha": 0.55}
        axis.plot(throughput, p99, marker="o", label=trial.candidate.key if trial is winner else None, **style)
    axis.axhline(p99_ms, color="red", linestyle="--", label=f"SLO p99 {p99_ms:g} ms")
    axis.set_xlabel("throughput (requests/s)")
    axis.set_ylabel("p99 latency (ms)")
    axis.set_title(f"{model}: p99 latency vs throughput, one line per config (winner in black)")
    axis.legend(loc="upper left", fontsize=8)
    axis.grid(alpha=0.3)
    written.append(folder / "latency_vs_throughput.png")
    figure.savefig(written[-1], dpi=110, bbox_inches="tight")
    plt.close(figure)

    if winner and winner.results:
        histogram: dict[int, int] = {}
        for result in winner.results:
            for size, count in result.get("server", {}).get(model, {}).get("batch_executions", {}).items():
                histogram[int(size)] = histogram.get(int(size), 0) + count
        if histogram:
            figure, axis = plt.subplots(figsize=(7, 4))
            sizes = sorted(histogram)
            axis.bar([str(s) for s in sizes], [histogram[s] for s in sizes])
            axis.set_xlabel("executed batch size")
            axis.set_ylabel("executions")
            axis.set_title(f"{model}: executed batch sizes under the winner {winner.candidate.key}")
            written.append(folder / "winner_batch_sizes.png")
            figure.savefig(written[-1], dpi=110, bbox_inches="tight")
            plt.close(figure)
    return written
