"""One target's load levels, measured and summarised: what `make bench-llm` and `make bench-lora` share."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tools.bench.llm.driver import LevelDriver, Schedule, level_label
from tools.load.llm.clients import StreamClient
from tools.load.llm.figures import LevelFigures, Slo
from tools.load.llm.records import StreamRecord
from tools.load.llm.workload import LlmRequest, Tokenizer, gguf_path, warmup_request
from tools.load.schedules import ClosedLoop, Poisson

log = logging.getLogger("tools.bench.llm")


@dataclass(frozen=True)
class Plan:
    """The load of a run: levels and how long each lasts."""

    concurrency: tuple[int, ...]
    rates: tuple[float, ...]
    seconds: float
    drain_s: float
    warmup_s: float = 0.0  # of the same load before each level's scored window (served, not scored)

    def schedules(self) -> list[Schedule]:
        return [*(ClosedLoop(c) for c in self.concurrency), *(Poisson(r) for r in self.rates)]


def load_tokenizer(path: Path) -> Tokenizer:
    if path.is_file():
        return Tokenizer.from_file(path)
    log.info("no %s (run `make export`); sizing prompts with the GGUF's tokenizer", path)
    return Tokenizer.from_gguf(gguf_path())


async def measure_target(
    client: StreamClient, requests: Sequence[LlmRequest], plan: Plan, seed: int
) -> list[tuple[Schedule, list[StreamRecord], float, int, float | None]]:
    """Per level: (schedule, records, duration, late sends, load average at its start)."""
    await client.open()
    try:
        for _ in range(2):  # warm-up, not measured
            await client.generate(warmup_request(8), StreamRecord(-1, 0.0), time.perf_counter)
        runs = []
        schedules = list(plan.schedules())
        stride = max(len(requests) // len(schedules), 1)  # each level its own part of the workload, the same for every target
        for number, schedule in enumerate(schedules):
            driver = LevelDriver(
                client, requests, plan.seconds, plan.drain_s, seed=seed + number, warmup_s=plan.warmup_s, first_request=number * stride
            )
            run = await driver.run(schedule)
            runs.append((schedule, run.records, run.duration_s, run.late_sends, run.load_average))
        return runs
    finally:
        await client.close()


def level_entry(
    target: str, schedule: Schedule, records: list[StreamRecord], duration_s: float, late_sends: int, load: float | None, slo: Slo
) -> dict:
    figures = LevelFigures.of(records, duration_s, slo)
    closed = isinstance(schedule, ClosedLoop)
    errors = [r.message for r in records if not r.completed and r.message]
    entry = {
        "target": target,
        "kind": "closed" if closed else "poisson",
        "load": schedule.concurrency if closed else schedule.rate,
        "label": level_label(schedule),
        **figures.as_dict(),
        "late_sends": late_sends,
        "load_average": load,
        "first_error": errors[0] if errors else None,
    }
    log.info(
        "%s, %s: %.1f out tok/s, goodput %.3f req/s, TTFT p99 %s ms, TPOT p50 %s ms, %d/%d done",
        target, entry["label"], figures.output_tokens_per_s, figures.goodput_rps, figures.ttft_p99_ms, figures.tpot_p50_ms,
        figures.completed, figures.requests,
    )  # fmt: skip
    return entry
