"""One prediction: drive the simulated pipeline with a workload and summarise it in the
load driver's terms (throughput of successful requests, latency percentiles, executed
encoder batches), so a prediction and a measurement compare field by field."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from tools.simulate.batcher import BatcherSpec
from tools.simulate.cost_model import CostModel
from tools.simulate.discrete_event import OK, SimRequest, Simulation
from tools.simulate.workload import Workload


@dataclass
class ClassFigures:
    sent: int
    ok: int
    rejected: int
    timeouts: int
    throughput_rps: float
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None


@dataclass
class Prediction:
    throughput_rps: float
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    avg_batch: float | None  # encoder rows per execution
    tokenizer_avg_batch: float | None
    rejected: int
    timeouts: int
    sent: int
    encoder_queue_ms: float | None = None  # mean wait in the encoder's queue (Triton's queue statistic), successful requests
    per_priority: dict[int, ClassFigures] = field(default_factory=dict)
    batch_histogram: dict[int, int] = field(default_factory=dict)  # encoder executed batch size -> executions
    simulated_s: float = 0.0

    def to_dict(self) -> dict:
        values = dict(self.__dict__)
        values["per_priority"] = {str(level): figures.__dict__ for level, figures in self.per_priority.items()}
        values["batch_histogram"] = {str(size): count for size, count in sorted(self.batch_histogram.items())}
        return values


def percentiles(latencies: np.ndarray) -> tuple[float | None, float | None, float | None]:
    if not len(latencies):
        return None, None, None
    p50, p90, p99 = np.percentile(latencies, [50, 90, 99])
    return float(p50), float(p90), float(p99)


def simulate(
    cost: CostModel, steps: list[tuple[str, BatcherSpec]], workload: Workload, seed: int = 0, stall: bool | None = None
) -> tuple[list[SimRequest], Simulation]:
    """Run the workload to completion (every request answered or failed)."""
    sim = Simulation(cost, steps, seed=seed, stall=stall, cache_hit_rate=workload.cache_hit_rate)
    traffic = workload.traffic
    count = workload.requests
    tokens = workload.lengths.tokens(count)
    draw = traffic.mix().requests()  # the load driver's own seeded draws: the same priority per request index
    priorities = [draw(i).priority for i in range(count)]
    requests = [SimRequest(i, 0.0, int(priorities[i]), int(tokens[i]), traffic.timeout_us) for i in range(count)]
    if traffic.closed_loop:
        issued = iter(requests)

        def send(client: int, now: float) -> None:
            request = next(issued, None)
            if request is not None:
                request.sent, request.client = now, client
                sim.push(now, sim.arrive, request)

        sim.on_done = lambda request, now: send(request.client, now)
        for client in range(min(traffic.concurrency, count)):
            send(client, 0.0)
    else:
        for request, at in zip(requests, workload.arrivals_ms()):
            request.sent = float(at)
            sim.push(request.sent, sim.arrive, request)
    sim.run()
    return requests, sim


def predict(
    cost: CostModel, steps: list[tuple[str, BatcherSpec]], workload: Workload, seed: int = 0, stall: bool | None = None
) -> Prediction:
    requests, sim = simulate(cost, steps, workload, seed, stall)
    sent = np.fromiter((r.sent for r in requests), float, len(requests))
    done = np.fromiter((r.done for r in requests), float, len(requests))
    outcomes = np.asarray([r.outcome for r in requests])
    levels = np.fromiter((r.priority for r in requests), int, len(requests))
    if workload.window_s and not workload.traffic.closed_loop:
        start, end = workload.window_s[0] * 1000.0, workload.window_s[1] * 1000.0
        chosen = (sent >= start) & (sent < end)
    else:
        start = sent[int(len(requests) * workload.warmup_share)] if workload.warmup_share else sent[0]
        end = sent.max() if sent.max() > start else done.max()
        chosen = sent >= start
    seconds = max((end - start) / 1000.0, 1e-9)
    ok = chosen & (outcomes == OK)
    latencies = done - sent
    p50, p90, p99 = percentiles(latencies[ok])
    per_priority = {}
    for level in sorted(set(levels[chosen].tolist())):
        mine = chosen & (levels == level)
        mine_ok = mine & (outcomes == OK)
        per_priority[int(level)] = ClassFigures(
            int(mine.sum()),
            int(mine_ok.sum()),
            int((mine & (outcomes == "rejected")).sum()),
            int((mine & (outcomes == "timeout")).sum()),
            float(mine_ok.sum() / seconds),
            *percentiles(latencies[mine_ok]),
        )
    histograms = {name: Counter() for name in ("tokenizer", "encoder")}
    for execution in sim.executions:
        if execution.started >= start:
            histograms.setdefault(execution.step, Counter())[execution.rows] += 1

    def average(histogram: Counter) -> float | None:
        executions = sum(histogram.values())
        return sum(size * n for size, n in histogram.items()) / executions if executions else None

    waits = [r.queue_ms["encoder"] for r, keep in zip(requests, ok) if keep and "encoder" in r.queue_ms]
    return Prediction(
        encoder_queue_ms=float(np.mean(waits)) if waits else None,
        throughput_rps=float(ok.sum() / seconds),
        p50_ms=p50,
        p90_ms=p90,
        p99_ms=p99,
        avg_batch=average(histograms["encoder"]),
        tokenizer_avg_batch=average(histograms["tokenizer"]),
        rejected=int((chosen & (outcomes == "rejected")).sum()),
        timeouts=int((chosen & (outcomes == "timeout")).sum()),
        sent=int(chosen.sum()),
        per_priority=per_priority,
        batch_histogram=dict(histograms["encoder"]),
        simulated_s=float(done.max() / 1000.0),
    )
