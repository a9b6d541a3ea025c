"""Traffic profiles: how many users should run at second t. Pure functions of time, kept
apart from locust (importing locust monkey-patches the process), so they test plainly;
`loadtest/shapes.py` wraps them in locust `LoadTestShape` classes."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_CYCLE_S = 60.0  # the step/wave cycle when no --run-time bounds the test (web UI)


@dataclass(frozen=True)
class ShapeParams:
    users: int  # the peak
    spawn_rate: float
    run_time_s: float | None = None
    burst_every_s: float = 15.0
    burst_length_s: float = 5.0
    wave_period_s: float = 0.0

    @property
    def cycle_s(self) -> float:
        return self.run_time_s or DEFAULT_CYCLE_S


def steady(t: float, p: ShapeParams) -> int:
    """Constant load: the baseline for SLO checks."""
    return p.users


def step(t: float, p: ShapeParams, steps: int = 4) -> int:
    """Four equal steps up to the peak: shows where latency starts to climb."""
    index = min(steps - 1, int((t % p.cycle_s) / p.cycle_s * steps))
    return max(1, round(p.users * (index + 1) / steps))


def burst(t: float, p: ShapeParams) -> int:
    """A quarter of the peak, spiking to the peak at the start of every period: the case
    the queue policy (reject instead of piling up) exists for."""
    return p.users if (t % p.burst_every_s) < p.burst_length_s else max(1, p.users // 4)


def wave(t: float, p: ShapeParams) -> int:
    """A diurnal-like cosine between a tenth of the peak and the peak."""
    period = p.wave_period_s or p.cycle_s
    low = max(1, p.users // 10)
    return round(low + (p.users - low) * (1 - math.cos(2 * math.pi * t / period)) / 2)


PROFILES: dict[str, Callable[[float, ShapeParams], int]] = {"steady": steady, "step": step, "burst": burst, "wave": wave}


def tick_at(profile: Callable[[float, ShapeParams], int], t: float, p: ShapeParams) -> tuple[int, float] | None:
    """A locust tick: (users, spawn rate), or None once --run-time is over."""
    if p.run_time_s is not None and t >= p.run_time_s:
        return None
    return max(0, profile(t, p)), p.spawn_rate


def params_from_options(options) -> ShapeParams:
    """From locust's parsed options (which the web UI's form updates too)."""
    users = int(options.num_users or 1)
    return ShapeParams(
        users=users,
        spawn_rate=float(options.spawn_rate or users),
        run_time_s=float(options.run_time) if options.run_time else None,
        burst_every_s=float(options.burst_every_s),
        burst_length_s=float(options.burst_length_s),
        wave_period_s=float(options.wave_period_s),
    )
