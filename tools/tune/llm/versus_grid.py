"""Benchmark: the model-guided pick against a live grid over the same space.

The goal it checks: the pick's goodput is at least the best of a live grid over the same
space, found in at most a third of the grid's wall time. Runs `python -m tools.tune --model
llm` twice with the same space, level, workload and SLO: model-guided first (simulate every
candidate, measure the top few and the config), then `--strategy grid` (measure every
candidate, with the same step cost model, so the same engine threads and dtype). The grid
measures the pick as well, so the pick is also judged against the grid's best inside one
run, where the machine's drift between runs (about 10% here) does not enter. When the two
differ, a rematch (tools/tune/llm/rematch.py) measures them head to head, alternating, with
longer levels: the grid's best is the highest of many noisy levels, and one level of the
pick against it judges the noise more than the configs.

    python -m tools.tune.llm.versus_grid --slo ttft_p99=5s,tpot_p99=300ms --concurrency 8 --quick \\
        --max-num-seqs 4,8 --max-num-batched-tokens 64,256,512 --long-prefill-token-threshold 64,256
    make bench-tune-llm
    make bench-tune-llm LLM_ENGINE=vllm   # --engine vllm: vLLM's knobs, its step cost model, every candidate a vLLM reload
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path

from tools.cli.arguments import parse_settings
from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.machine import cpu_line, describe_cpu
from tools.paths import REPO_ROOT
from tools.simulate.llm.setup import ENGINE_COST_MODELS
from tools.simulate.llm.validate import GOALS, relative_error, summarize
from tools.tune.llm.command import LlmTuneSettings, build_parser, workload_requests
from tools.tune.llm.command import run as run_tune
from tools.tune.llm.rematch import live_levels, rematch, verdict

log = logging.getLogger("tune.llm.versus_grid")

OWNED_FLAGS = ("--strategy", "--report-dir", "--apply", "--output", "--simulate-only", "--top")
WALL_TIME_GOAL = 1 / 3  # the pick's wall time over the grid's


def _same_knobs(row: dict, parameters: dict) -> bool:
    return all(row["parameters"].get(key) == value for key, value in parameters.items())


def _score(row: dict) -> tuple:
    """The order tools/tune/llm/space.py ranks measured candidates by, from a report row."""
    figures = row["measured"]
    return (row["meets_slo"], figures["goodput_rps"], figures["output_tokens_per_s"] if row["meets_slo"] else 0.0)


def grid_prediction_errors(grid: dict, predicted: str = "predicted") -> dict:
    """The simulator's median |error| over the grid's measured candidates, the anchor left out
    (its level scaled the model): the simulator's accuracy goals (validate.GOALS) on every config of the space.
    `predicted="predicted_as_calibrated"`: against the model before the live scale."""
    held_out = [row for row in grid["measured"] if "anchor" not in row["role"] and predicted in row]
    rows = [{"errors": {name: relative_error(row[predicted].get(name), row["measured"].get(name)) for name in GOALS}} for row in held_out]
    return summarize(rows)


def rematch_result(pick: dict, rows: list[dict] | None) -> dict | None:
    """The pick's standing in the rematch's rows (tools/tune/llm/rematch.py's verdict)."""
    if rows is None:
        return None
    pick_row = next(row for row in rows if _same_knobs(row, pick))
    rival = max((row["pooled"]["goodput_rps"] for row in rows if row is not pick_row), default=0.0)
    mine = pick_row["pooled"]["goodput_rps"]
    return {
        "rows": rows,
        "pick_first": rows[0] is pick_row,
        # the pick's pooled goodput against the grid's best's (the other contender)
        "pick_goodput_gap": round(mine / rival - 1, 4) if rival else None,
        "one_request_share": pick_row["one_request_share"],
    }


def compare(guided: dict, grid: dict, rematch_rows: list[dict] | None = None) -> dict:
    """The figures the benchmark reports, from the two tune reports (tune-llm.json) and the
    rematch's rows when one ran."""
    pick = guided["winner"]
    pick_row = next(row for row in guided["measured"] if _same_knobs(row, pick))
    grid_rows = sorted(grid["measured"], key=_score, reverse=True)
    grid_best = grid_rows[0]
    pick_in_grid = next((row for row in grid_rows if _same_knobs(row, pick)), None)
    rank = None if pick_in_grid is None else grid_rows.index(pick_in_grid) + 1
    wall_ratio = guided["wall_s"] / grid["wall_s"]
    best_goodput = grid_best["measured"]["goodput_rps"]
    in_grid_goodput = None if pick_in_grid is None else pick_in_grid["measured"]["goodput_rps"]
    rematched = rematch_result(pick, rematch_rows)
    return {
        "engine": guided.get("engine", "native"),
        "candidates": grid["simulated"] - 1,
        "pick": {"parameters": pick, "measured": pick_row["measured"], "meets_slo": pick_row["meets_slo"]},
        "pick_in_grid": None if pick_in_grid is None else {"rank": rank, "measured": pick_in_grid["measured"]},
        "grid_best": {"parameters": grid_best["parameters"], "measured": grid_best["measured"], "meets_slo": grid_best["meets_slo"]},
        "live_scale": {"model-guided": guided.get("live_scale"), "grid": grid.get("live_scale")},
        "grid_prediction_errors": grid_prediction_errors(grid),
        "grid_prediction_errors_as_calibrated": grid_prediction_errors(grid, "predicted_as_calibrated"),
        "guided_wall_s": guided["wall_s"],
        "grid_wall_s": grid["wall_s"],
        "wall_ratio": round(wall_ratio, 3),
        "rematch": rematched,
        "goal": {
            "goodput_at_least_grid_best_same_run": in_grid_goodput is not None and in_grid_goodput >= best_goodput,
            "goodput_at_least_grid_best_across_runs": pick_row["measured"]["goodput_rps"] >= best_goodput,
            # None: no rematch ran (the pick is the grid's best, or --rematch-rounds 0)
            "goodput_at_least_grid_best_rematch": None if rematched is None else (rematched["pick_goodput_gap"] or 0.0) >= 0,
            "within_a_third_of_the_grid_wall_time": wall_ratio <= WALL_TIME_GOAL,
        },
    }


def summary_text(result: dict, cpu: str) -> str:
    def figures(measured: dict) -> str:
        return (
            f"goodput {measured['goodput_rps']:.3f}/s, {measured['output_tokens_per_s']:.1f} tok/s, "
            f"TTFT p99 {measured['ttft_p99_ms']:.0f} ms, TPOT p99 {measured['tpot_p99_ms']:.0f} ms"
        )

    pick, best, goal = result["pick"], result["grid_best"], result["goal"]
    lines = [
        cpu,
        f"engine: {result.get('engine', 'native')}; space: {result['candidates']} candidates plus the config",
        f"model-guided pick: {pick['parameters']}: {figures(pick['measured'])} (its own run)",
    ]
    if result["pick_in_grid"] is not None:
        lines.append(f"  the same in the grid's run: rank {result['pick_in_grid']['rank']}, {figures(result['pick_in_grid']['measured'])}")
    lines += [
        f"grid's best: {best['parameters']}: {figures(best['measured'])}",
        f"wall time: model-guided {result['guided_wall_s']:.0f} s, grid {result['grid_wall_s']:.0f} s "
        f"(ratio {result['wall_ratio']:.2f}, goal <= 0.33)",
        "goals: " + ", ".join(f"{name.replace('_', ' ')}: {'yes' if met else 'no'}" for name, met in goal.items() if met is not None),
    ]
    rematched = result.get("rematch")
    if rematched is not None:
        rounds = len(rematched["rows"][0]["levels"])
        lines.append(f"rematch ({rounds} rounds each, alternating, pooled):")
        lines += [f"  {row['label']}: {figures(row['pooled'])}, {row['pooled']['requests']} requests" for row in rematched["rows"]]
        lines.append(
            f"  the pick's goodput {rematched['pick_goodput_gap']:+.1%} against the grid's best's "
            f"(one request: {rematched['one_request_share']:.1%} of the pick's)"
        )
    for key, how in (("grid_prediction_errors", ""), ("grid_prediction_errors_as_calibrated", " as calibrated (no scale)")):
        cells = [
            f"{name} {item['median_abs_error']:.0%} (goal {item['goal']:.0%})"
            for name, item in result.get(key, {}).items()
            if item["median_abs_error"] is not None
        ]
        if cells:
            lines.append(f"the simulator{how} over the grid's candidates, median |error|: " + ", ".join(cells))
    return "\n".join(lines)


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.tune.llm.versus_grid", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "reports" / "bench-tune-llm", help="reports (default %(default)s)")
    parser.add_argument(
        "--rematch-rounds",
        type=int,
        default=2,
        help="rounds of the pick against the grid's best when they differ, alternating (0: none; default %(default)s)",
    )
    parser.add_argument("--rematch-seconds", type=float, default=60.0, help="sending time of a rematch level (default %(default)s)")
    add_verbosity_flags(parser)
    args, tune_args = parser.parse_known_args(argv)
    owned = [flag for flag in tune_args if flag.split("=")[0] in OWNED_FLAGS]
    if owned:
        parser.error(f"{', '.join(owned)}: set by the benchmark itself (it runs both strategies)")
    if args.rematch_rounds < 0 or args.rematch_seconds <= 0:
        parser.error("--rematch-rounds takes a count >= 0 and --rematch-seconds a time above 0")
    configure_logging(args)
    cpu = cpu_line(describe_cpu())
    print(cpu, flush=True)
    guided_dir, grid_dir = args.out / "model-guided", args.out / "grid"
    log.info("1/2 model-guided: simulate every candidate, measure the top 2 and the config")
    status = run_tune(["--model", "llm", *tune_args, "--top", "2", "--report-dir", str(guided_dir)])
    if status != 0:
        return status
    guided = json.loads((guided_dir / "tune-llm.json").read_text())
    # the grid measures with the same cost model: the same engine threads and dtype live
    cost_model = guided["cost_model"] if Path(guided["cost_model"]).is_file() else str(ENGINE_COST_MODELS[guided["engine"]])
    grid_args = [*_without_option(tune_args, "--cost-model"), "--cost-model", cost_model, "--strategy", "grid"]
    log.info("2/2 grid: measure every candidate of the same space")
    status = run_tune(["--model", "llm", *grid_args, "--report-dir", str(grid_dir)])
    if status != 0:
        return status
    grid = json.loads((grid_dir / "tune-llm.json").read_text())
    grid_best = max(grid["measured"], key=_score)["parameters"]
    rematch_rows = None
    if args.rematch_rounds and grid_best != guided["winner"]:
        log.info("rematch: the pick against the grid's best, %d rounds of %g s levels", args.rematch_rounds, args.rematch_seconds)
        rematch_rows = head_to_head(grid_args, cost_model, [grid_best, guided["winner"]], args.rematch_rounds, args.rematch_seconds)
    result = {"cpu": cpu, "tune_args": tune_args, **compare(guided, grid, rematch_rows)}
    (args.out / "versus-grid.json").write_text(json.dumps(result, indent=1))
    text = summary_text(result, cpu)
    (args.out / "versus-grid.txt").write_text(text + "\n")
    print(text)
    return 0


def head_to_head(tune_args: list[str], cost_model: str, contenders: list[dict], rounds: int, seconds: float) -> list[dict]:
    """The rematch live: the tuner's server, workload, load and SLO, the engine the cost model
    was measured on, levels of `seconds`."""
    from llm.serving.knobs import parameters_from_pbtxt
    from tools.simulate.llm.live import engine_parameters, live_server
    from tools.simulate.llm.step_cost import StepCostModel

    settings = parse_settings(build_parser(), ["--model", "llm", *tune_args], LlmTuneSettings.from_cli_args)
    base = {**parameters_from_pbtxt(settings.config), **engine_parameters(StepCostModel.load(Path(cost_model)).engine)}
    requests = settings.adapters.apply(workload_requests(settings), settings.seed)
    vllm_config = settings.config if settings.engine == "vllm" else None
    with live_server(settings.url, settings.grpc_url, settings.admin_key, vllm_config, settings.adapters) as server:
        measure_level = live_levels(server, base, requests, settings.schedule)
        results = rematch(contenders, measure_level, dataclasses.replace(settings.level, seconds=seconds), rounds, settings.slo)
    return verdict(results, settings.slo)


def _without_option(args: list[str], option: str) -> list[str]:
    """`args` without `option VALUE` or `option=VALUE`."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(option + "="):
            kept.append(arg)
    return kept


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
