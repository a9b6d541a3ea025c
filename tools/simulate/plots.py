"""Plots of a cost model and of a validation (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

from tools.simulate.cost_model import CostModel

NO_MATPLOTLIB = "no plot: matplotlib is not installed in this environment (the JSON has every figure)"


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        return None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_cost_model(model: CostModel, path: Path) -> str:
    """Encoder execution time per batch size, one line per length: the readings as
    markers, the fitted table with its interpolation as lines."""
    plt = _pyplot()
    if plt is None:
        return NO_MATPLOTLIB
    grids = model.steps["encoder"].by_instances
    measured = model.extra.get("measured_points", {})
    fits = model.extra.get("fits", {})
    figure, axes = plt.subplots(1, len(grids), figsize=(5.5 * len(grids), 4), squeeze=False)
    for axis, (count, grid) in zip(axes[0], sorted(grids.items())):
        mask = measured.get(str(count))
        raw = fits.get(str(count), {}).get("raw_execution_ms") or grid.execution_ms
        dense = list(range(grid.batch_sizes[0], grid.batch_sizes[-1] + 1))
        for j, length in enumerate(grid.lengths):
            line = axis.plot(dense, [grid.at(b, length) for b in dense], label=f"{length} tokens")[0]
            for i, batch in enumerate(grid.batch_sizes):
                if not mask or mask[i][j]:
                    axis.plot(batch, raw[i][j], "o", color=line.get_color())
        axis.set(title=f"encoder, {count} instance(s) ({model.kind})", xlabel="batch size", ylabel="ms per execution")
        axis.legend(fontsize=7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return f"wrote the plot {path}"


def plot_validation(rows: list[dict], path: Path) -> str:
    plt = _pyplot()
    if plt is None:
        return NO_MATPLOTLIB
    fields = (("throughput_rps", "throughput req/s"), ("p99_ms", "p99 ms"), ("avg_batch", "avg encoder batch"))
    figure, axes = plt.subplots(1, 3, figsize=(14, 4))
    for axis, (key, label) in zip(axes, fields):
        pairs = [
            (r["measured"][key], r["predicted"][key])
            for r in rows
            if r["measured"].get(key) is not None and r["predicted"].get(key) is not None
        ]
        if pairs:
            xs, ys = zip(*pairs)
            axis.scatter(xs, ys, s=14)
            top = max(max(xs), max(ys)) * 1.05
            axis.plot([0, top], [0, top], "k--", linewidth=0.8)
        axis.set(title=label, xlabel="measured", ylabel="predicted")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return f"wrote the plot {path}"


def plot_frontier(curves: dict[str, list[tuple[float, float | None]]], p99_ms: float, path: Path, title: str) -> str:
    """Predicted p99 against offered rate per replica, one line per config, the SLO as a
    horizontal line: where each config's curve crosses it is its capacity per replica."""
    plt = _pyplot()
    if plt is None:
        return NO_MATPLOTLIB
    figure, axis = plt.subplots(figsize=(8, 5))
    for label, points in curves.items():
        kept = [(rate, p99) for rate, p99 in points if p99 is not None]
        if kept:
            axis.plot([r for r, _ in kept], [p for _, p in kept], marker="o", markersize=3, label=label)
    axis.axhline(p99_ms, color="black", linestyle="--", linewidth=1, label=f"SLO p99 {p99_ms:g} ms")
    axis.set_yscale("log")
    axis.set_xlabel("offered rate per replica (req/s)")
    axis.set_ylabel("predicted p99 (ms)")
    axis.set_title(title, fontsize=9)
    axis.legend(fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return f"wrote the plot {path}"
