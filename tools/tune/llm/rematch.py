"""Settle a close race: measure contenders head to head, alternating, on the same requests.

A grid's best is the highest of many noisy levels (13-16 requests a level on a 2-core CPU),
so it is biased upward (the winner's curse): comparing another config's one level with it
asks that config to beat the noise. The rematch measures the contenders in rounds, every
round on a part of the workload no earlier round sent (no prompt replayed from the prefix
cache) and each contender on the same requests within a round, in an order that turns round
each round (ABBA: neither always goes first or always follows the other), with longer
levels. Each contender's figures pool its records over every round (p99s over all of its
requests, goodput over its whole measured time).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from tools.load.llm.figures import LevelFigures
from tools.load.llm.records import StreamRecord
from tools.simulate.llm.predict import LevelPlan
from tools.simulate.llm.slo import LlmSlo
from tools.tune.llm.space import label, score

if TYPE_CHECKING:
    from tools.bench.llm.driver import Schedule
    from tools.load.llm.workload import LlmRequest
    from tools.simulate.llm.live import LiveServer

log = logging.getLogger("tune.llm.rematch")

MeasureLevel = Callable[[Mapping[str, str], LevelPlan], tuple[list[StreamRecord], float, int]]
"""(knobs, level) -> (records, measured seconds, requests sent): one live level."""


def live_levels(server: LiveServer, base: Mapping[str, str], requests: Sequence[LlmRequest], schedule: Schedule) -> MeasureLevel:
    """A MeasureLevel on a live server: reload with `base` and the contender's knobs, drive one level."""

    def measure_level(knobs: Mapping[str, str], level: LevelPlan) -> tuple[list[StreamRecord], float, int]:
        server.apply({**base, **knobs})
        records, duration_s = server.measure_records(requests, schedule, level)
        return records, duration_s, server.last_sent

    return measure_level


def round_orders(contenders: int, rounds: int) -> list[list[int]]:
    """Contender indexes per round: forward in even rounds, backward in odd ones (ABBA for two)."""
    if contenders < 1 or rounds < 1:
        raise ValueError(f"a rematch needs at least one contender and one round, got {contenders} and {rounds}")
    forward = list(range(contenders))
    return [forward if number % 2 == 0 else forward[::-1] for number in range(rounds)]


@dataclass
class ContenderResult:
    """One contender's levels and its records pooled over them."""

    parameters: dict[str, str]
    records: list[StreamRecord] = field(default_factory=list)
    duration_s: float = 0.0
    levels: list[dict] = field(default_factory=list)  # per round: first request, goodput, tokens/s

    def pooled(self, slo: LlmSlo) -> LevelFigures:
        return LevelFigures.of(self.records, self.duration_s, slo.per_request())


def rematch(
    contenders: Sequence[Mapping[str, str]], measure_level: MeasureLevel, level: LevelPlan, rounds: int, slo: LlmSlo
) -> list[ContenderResult]:
    """Measure every contender once per round; round r starts past every request an earlier
    round sent (all contenders of one round get the same requests)."""
    results = [ContenderResult(dict(knobs)) for knobs in contenders]
    first = level.first_request
    for number, order in enumerate(round_orders(len(contenders), rounds)):
        furthest = 0
        for index in order:
            result = results[index]
            records, duration_s, sent = measure_level(result.parameters, replace(level, first_request=first))
            figures = LevelFigures.of(records, duration_s, slo.per_request())
            result.records += records
            result.duration_s += duration_s
            result.levels.append({"round": number + 1, "first_request": first, **figures.as_dict()})
            furthest = max(furthest, sent)
            log.info(
                "rematch round %d/%d, %s: goodput %.3f/s, %.1f tok/s", number + 1, rounds, label(result.parameters),
                figures.goodput_rps, figures.output_tokens_per_s,
            )  # fmt: skip
        first += furthest
    return results


def verdict(results: Sequence[ContenderResult], slo: LlmSlo) -> list[dict]:
    """The contenders by the tuner's order on their pooled figures, best first, each with its
    gap to the best and what one request is worth in its goodput (the measurement's grain)."""
    pooled = [(result, result.pooled(slo)) for result in results]
    pooled.sort(key=lambda pair: score(pair[1], slo), reverse=True)
    rows = [
        {
            "parameters": result.parameters,
            "label": label(result.parameters),
            "pooled": figures.as_dict(),
            "meets_slo": slo.met_by(figures),
            "levels": result.levels,
        }
        for result, figures in pooled
    ]
    best = rows[0]["pooled"]["goodput_rps"]
    for row in rows:
        pooled = row["pooled"]
        row["goodput_gap"] = round(pooled["goodput_rps"] / best - 1, 4) if best else None
        row["one_request_share"] = round(1 / (pooled["goodput_rps"] * pooled["duration_s"]), 4) if pooled["goodput_rps"] else None
    return rows


def close_contenders(rows: Sequence[dict], slo: LlmSlo, limit: int = 3) -> list[dict]:
    """The measured rows (tools/tune/llm/command.py's) one level cannot tell from the leader:
    on the same side of the SLO, with goodput within one request's share of the leader's. The
    leader first; at most `limit`; fewer than two means there is nothing to settle."""
    ranked = sorted(rows, key=lambda row: score(LevelFigures(**row["measured"]), slo), reverse=True)
    leader = ranked[0]
    goodput, duration = leader["measured"]["goodput_rps"], leader["measured"]["duration_s"]
    if goodput <= 0 or duration <= 0:
        return [leader]
    one_request = 1 / (goodput * duration) + 1e-9  # a gap of exactly one request counts as within
    close = [
        row
        for row in ranked[1:]
        if row["meets_slo"] == leader["meets_slo"] and (goodput - row["measured"]["goodput_rps"]) / goodput <= one_request
    ]
    return [leader, *close][:limit]
