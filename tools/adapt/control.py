"""The control law: which `max_queue_delay_microseconds` to run next, and why.

The delay only pays when the instance is busy: then a longer wait forms larger batches,
and on a model whose rows/s grows with the batch size that is capacity the queue needs.
When the instance is mostly idle the delay is pure added latency. So the direction comes
from the measured utilisation (share of the window the instance spent executing) and
the SLO decides how urgent a move is:

- overloaded (busy >= `busy_high`, or requests rejected), batching gains throughput and
  the executed batches are not already full: additive increase by `step_up_us`
  (bounded by `max_delay_us`);
- a backlog (mean queue time well above the delay itself, while busy > `busy_low`)
  counts as overloaded: requests wait for the instance, not for the batcher;
- latency estimate over the SLO while not overloaded, and the delay is at least
  `delay_share` of the mean latency (else cutting it cannot fix the breach and the
  reload costs more than it saves), or idle (busy <= `busy_low`): multiplicative
  decrease by `decrease_factor` (bounded by `max_step_us`; below `min_step_us` it snaps
  to `min_delay_us`);
- overloaded, but the latency estimate is over the SLO and the delay already exceeds the
  mean execution time: decrease (waiting longer than a batch takes adds more latency
  than the larger batch saves);
- in between: hold (the band between the two thresholds is the hysteresis).

A raise must pay: the controller remembers the window before each raise and judges the
raise on the first full window after its reload (the one straddling it is skipped). If
neither the mean executed batch nor the throughput grew by `min_batch_growth`, and the
latency estimate did not fall by 10%, the raise is undone. An undo, or a decrease made while
overloaded, leaves a ceiling: for `raise_holdoff_s` no raise may reach the delay that
did not help (with preferred sizes or a saturated instance the batch stops growing
long before `max_delay_us`, and "busy, so wait longer" would otherwise climb on).

A move happens only after `confirm_windows` windows in a row agree (one, for a raise
asked for while the mean queue time alone exceeds the SLO: each window of waiting
misses), at least `min_interval_s` after the last change, and never while a reload is in flight (a reload
costs about 2 s of model loading on the same cores). A failed reload restores the last
good delay. Clipper's AIMD sized batches against the SLO; here the SLO does not fix the
direction, because raising the delay is what rescues an overloaded instance.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

HOLD, UP, DOWN = "hold", "up", "down"


@dataclass(frozen=True)
class ControlSettings:
    p99_ms: float
    min_delay_us: int = 0
    max_delay_us: int = 20_000
    step_up_us: int = 2_000
    decrease_factor: float = 0.5
    max_step_us: int = 8_000
    min_step_us: int = 2_000  # a delay this small is dropped to min_delay_us in one step
    busy_high: float = 0.80
    busy_low: float = 0.50
    confirm_windows: int = 2
    min_interval_s: float = 8.0
    tail_factor: float = 3.0  # p99 estimate = mean server latency x this, when no p99 is observed
    batching_gain: float = 1.2  # best rows/s over batch-1 rows/s (from the model's curve)
    min_gain: float = 1.2  # below this, a longer delay buys too little capacity to pay for its latency and reload
    min_requests: int = 5  # fewer requests in a window: too little evidence to act on
    max_batch_size: int = 0  # batches this large cannot grow by waiting longer (0: unknown)
    backlog_ms: float = 5.0  # mean queue time above this (and above 2x the delay) counts as a backlog
    delay_share: float = 0.10  # an SLO breach lowers the delay only if it is at least this share of the mean latency
    min_batch_growth: float = 1.15  # a raise is kept only if the mean batch (or throughput) grew by this factor, or the latency fell
    raise_holdoff_s: float = 60.0  # after an undo, no raise back to the delay that did not help for this long

    def __post_init__(self) -> None:
        if self.p99_ms <= 0:
            raise ValueError("the p99 SLO must be positive")
        if not 0 <= self.min_delay_us <= self.max_delay_us:
            raise ValueError("need 0 <= min_delay_us <= max_delay_us")
        if not 0 < self.decrease_factor < 1:
            raise ValueError("decrease_factor must lie in (0, 1)")
        if not 0 <= self.busy_low < self.busy_high <= 1:
            raise ValueError("need 0 <= busy_low < busy_high <= 1 (the hysteresis band)")
        if self.step_up_us <= 0 or self.max_step_us <= 0 or self.confirm_windows < 1 or self.min_interval_s < 0:
            raise ValueError("steps, confirm_windows and min_interval_s must be positive")
        if self.min_batch_growth < 1 or self.raise_holdoff_s < 0:
            raise ValueError("min_batch_growth must be >= 1 and raise_holdoff_s not negative")


@dataclass(frozen=True)
class Observation:
    """One window of the model's server-side figures."""

    window_s: float
    requests: int
    busy: float  # share of the window the instance spent executing (0..1+)
    queue_ms: float | None  # mean per request (None: no request in the window)
    compute_ms: float | None  # mean per request (its batch's execution)
    batch_size: float | None  # mean executed batch size (None: nothing executed)
    rejected: int = 0  # failed requests (queue full, timeouts)
    p99_ms: float | None = None  # when a real tail figure is available

    @property
    def rate_rps(self) -> float:
        return self.requests / self.window_s if self.window_s > 0 else 0.0

    @property
    def mean_ms(self) -> float | None:
        return None if self.queue_ms is None or self.compute_ms is None else self.queue_ms + self.compute_ms

    def latency_estimate_ms(self, tail_factor: float) -> float | None:
        if self.p99_ms is not None:
            return self.p99_ms
        return None if self.mean_ms is None else self.mean_ms * tail_factor

    def figures(self) -> dict:
        def rounded(value: float | None, digits: int) -> float | None:
            return None if value is None else round(value, digits)

        return {
            "rate_rps": round(self.rate_rps, 1),
            "busy": round(self.busy, 2),
            "queue_ms": rounded(self.queue_ms, 1),
            "compute_ms": rounded(self.compute_ms, 1),
            "batch": rounded(self.batch_size, 2),
            "rejected": self.rejected,
            "p99_ms": rounded(self.p99_ms, 1),
        }


@dataclass(frozen=True)
class Decision:
    at_s: float
    before_us: int
    after_us: int
    direction: str  # what the window asked for (up/down/hold)
    reason: str
    figures: dict = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return self.after_us != self.before_us

    def to_dict(self) -> dict:
        return {**asdict(self), "changed": self.changed}

    def describe(self) -> str:
        head = f"delay {self.before_us} -> {self.after_us} us" if self.changed else f"hold {self.before_us} us"
        return f"{head}: {self.reason} ({', '.join(f'{k} {v}' for k, v in self.figures.items() if v is not None)})"


def backlogged(settings: ControlSettings, obs: Observation, current_us: int) -> bool:
    """Queue time far beyond the batcher's own delay is time spent waiting for the instance:
    load, not delay, is the cause, even when the busy share reads just under busy_high."""
    queued_ms = obs.queue_ms if obs.queue_ms is not None else 0.0  # no request waited in an idle window
    return queued_ms > max(2.0 * current_us / 1000.0, settings.backlog_ms) and obs.busy > settings.busy_low


def is_overloaded(settings: ControlSettings, obs: Observation, current_us: int) -> bool:
    return obs.busy >= settings.busy_high or obs.rejected > 0 or backlogged(settings, obs, current_us)


def want(settings: ControlSettings, obs: Observation, current_us: int = 0) -> tuple[str, str]:
    """The direction one window asks for, with the reason in words."""
    estimate = obs.latency_estimate_ms(settings.tail_factor)
    overloaded = is_overloaded(settings, obs, current_us)
    if obs.requests < settings.min_requests and not obs.rejected:
        return DOWN, f"almost idle ({obs.requests} requests in {obs.window_s:.1f} s): the delay only adds latency"
    if overloaded:
        if obs.rejected:
            cause = f"{obs.rejected} requests rejected"
        elif obs.busy >= settings.busy_high:
            cause = f"busy {obs.busy:.0%} >= {settings.busy_high:.0%}"
        else:
            cause = f"queue {obs.queue_ms:.0f} ms >> delay {current_us / 1000:g} ms (busy {obs.busy:.0%}): a backlog"
        if settings.batching_gain < settings.min_gain:
            return HOLD, (
                f"{cause}, but batching gains only {settings.batching_gain:.2f}x on this model (< {settings.min_gain:.2f}x): "
                "a longer delay buys too little capacity for its latency and reload"
            )
        if settings.max_batch_size and obs.batch_size is not None and obs.batch_size >= 0.9 * settings.max_batch_size:
            return HOLD, f"{cause}, but batches are already full ({obs.batch_size:.1f}): waiting longer cannot grow them"
        delay_ms = current_us / 1000.0
        if estimate is not None and estimate > settings.p99_ms and obs.compute_ms is not None and delay_ms > obs.compute_ms:
            return DOWN, (
                f"{cause}, but latency estimate {estimate:.0f} ms > SLO {settings.p99_ms:g} ms and the delay "
                f"({delay_ms:g} ms) already exceeds the execution ({obs.compute_ms:.1f} ms): waiting adds more than it saves"
            )
        return UP, f"{cause}: larger batches buy capacity (batching gain {settings.batching_gain:.2f}x)"
    if estimate is not None and obs.mean_ms is not None and estimate > settings.p99_ms:
        delay_ms = current_us / 1000.0
        if delay_ms < settings.delay_share * obs.mean_ms:
            # cutting a delay that is a sliver of the latency buys little and a reload costs ~2 s of it
            return HOLD, (
                f"latency estimate {estimate:.0f} ms > SLO {settings.p99_ms:g} ms, but the delay ({delay_ms:g} ms) "
                f"is under {settings.delay_share:.0%} of the mean {obs.mean_ms:.0f} ms: not the cause"
            )
        return DOWN, f"latency estimate {estimate:.0f} ms > SLO {settings.p99_ms:g} ms while busy only {obs.busy:.0%}"
    if obs.busy <= settings.busy_low:
        return DOWN, f"busy {obs.busy:.0%} <= {settings.busy_low:.0%}: the delay only adds latency"
    return HOLD, f"busy {obs.busy:.0%} inside the band {settings.busy_low:.0%}..{settings.busy_high:.0%}"


def next_delay(settings: ControlSettings, current_us: int, direction: str) -> int:
    """One bounded step in `direction`, clamped to [min_delay_us, max_delay_us]."""
    if direction == UP:
        target = current_us + min(settings.step_up_us, settings.max_step_us)
    elif direction == DOWN:
        target = math.floor(current_us * settings.decrease_factor)
        target = max(target, current_us - settings.max_step_us)
        if target - settings.min_delay_us < settings.min_step_us:
            target = settings.min_delay_us
    else:
        target = current_us
    return int(min(settings.max_delay_us, max(settings.min_delay_us, target)))


class Controller:
    """Feeds windows through the law and keeps the state that makes it safe: the delay the
    server runs (last good), the streak that confirms a direction, the time of the last
    change and whether a reload is in flight."""

    def __init__(self, settings: ControlSettings, delay_us: int) -> None:
        self.settings = settings
        self.delay_us = int(delay_us)  # what the server runs (the last good config)
        self.pending_us: int | None = None  # a reload to this delay is in flight
        self.last_change_s = -math.inf
        self.streak_direction, self.streak = HOLD, 0
        self.trial: _Trial | None = None  # a raise under judgement
        self.ceiling_us: int | None = None  # raises may not reach this delay ...
        self.ceiling_until_s = -math.inf  # ... until then

    @property
    def in_flight(self) -> bool:
        return self.pending_us is not None

    def observe(self, obs: Observation, now_s: float) -> Decision:
        direction, reason = want(self.settings, obs, self.delay_us)
        if direction == self.streak_direction:
            self.streak += 1
        else:
            self.streak_direction, self.streak = direction, 1
        before, figures = self.delay_us, obs.figures()
        estimate = obs.latency_estimate_ms(self.settings.tail_factor)
        figures["latency_estimate_ms"] = None if estimate is None else round(estimate, 1)
        blocked = self.trial
        verdict = self._judge(obs)
        if verdict is not None:
            undo_to, why = verdict
            since = now_s - self.last_change_s
            if since >= self.settings.min_interval_s:
                self._cap(before, now_s)
                self.pending_us, self.last_change_s, self.streak = undo_to, now_s, 0
                return Decision(now_s, before, undo_to, DOWN, why, figures)
            self.trial = blocked  # judged again on the next window
            return Decision(
                now_s, before, before, DOWN, f"{why}; last change {since:.1f} s ago (< {self.settings.min_interval_s:g} s)", figures
            )
        target = next_delay(self.settings, before, direction)
        if direction == UP and self.trial is not None:
            return Decision(now_s, before, before, HOLD, f"{reason}; the last raise is not judged yet", figures)
        if direction == UP and self.ceiling_us is not None and now_s < self.ceiling_until_s and target >= self.ceiling_us:
            ago_s = self.settings.raise_holdoff_s - (self.ceiling_until_s - now_s)
            why = f"{reason}; but a delay of {self.ceiling_us} us did not help {ago_s:.0f} s ago: holding"
            return Decision(now_s, before, before, HOLD, why, figures)
        if direction == HOLD or target == before:
            why = reason if direction == HOLD else f"{reason}; already at the bound {before} us"
            return Decision(now_s, before, before, direction, why, figures)
        if self.in_flight:
            return Decision(now_s, before, before, direction, f"{reason}; waiting: a reload is in flight", figures)
        # queueing alone past the SLO under load: every window of waiting misses, act on one
        urgent = direction == UP and obs.queue_ms is not None and obs.queue_ms > self.settings.p99_ms
        if self.streak < self.settings.confirm_windows and not urgent:
            why = f"{reason}; {self.streak}/{self.settings.confirm_windows} windows agree"
            return Decision(now_s, before, before, direction, why, figures)
        since = now_s - self.last_change_s
        if since < self.settings.min_interval_s:
            why = f"{reason}; last change {since:.1f} s ago (< {self.settings.min_interval_s:g} s)"
            return Decision(now_s, before, before, direction, why, figures)
        self.pending_us, self.last_change_s, self.streak = target, now_s, 0
        if direction == UP:
            self.trial = _Trial(before, target, obs)
        else:
            self.trial = None
            if is_overloaded(self.settings, obs, before):
                self._cap(before, now_s)  # lowered under load: the old delay was too long
        return Decision(now_s, before, target, direction, reason, figures)

    def _cap(self, delay_us: int, now_s: float) -> None:
        self.ceiling_us, self.ceiling_until_s, self.trial = delay_us, now_s + self.settings.raise_holdoff_s, None

    def _judge(self, obs: Observation) -> tuple[int, str] | None:
        """(the delay to go back to, why) when the raise under judgement did not pay; None otherwise.
        The first window after the reload may straddle it and is skipped."""
        trial = self.trial
        if trial is None or self.in_flight or self.delay_us != trial.after_us:
            return None
        trial.windows += 1
        if trial.windows < 2:
            return None
        self.trial = None
        growth = self.settings.min_batch_growth
        old, new = trial.before, obs
        grew = old.batch_size is not None and new.batch_size is not None and new.batch_size >= growth * old.batch_size
        faster = old.requests > 0 and new.rate_rps >= growth * old.rate_rps
        old_estimate, new_estimate = old.latency_estimate_ms(self.settings.tail_factor), new.latency_estimate_ms(self.settings.tail_factor)
        calmer = old_estimate is not None and new_estimate is not None and new_estimate < 0.9 * old_estimate
        fewer_failures = new.rejected < old.rejected
        if grew or faster or calmer or fewer_failures or old.batch_size is None or new.batch_size is None:
            return None
        return trial.before_us, (
            f"the raise {trial.before_us} -> {trial.after_us} us did not pay: batch {old.batch_size:.2f} -> {new.batch_size:.2f} "
            f"(< {growth:g}x), latency estimate {_ms(old_estimate)} -> {_ms(new_estimate)} ms: undone, "
            f"no raise to {trial.after_us} us for {self.settings.raise_holdoff_s:g} s"
        )

    def reload_finished(self, ok: bool) -> int:
        """The reload of the pending delay ended; on failure the last good delay stays."""
        if ok and self.pending_us is not None:
            self.delay_us = self.pending_us
        elif self.trial is not None and self.pending_us == self.trial.after_us:
            self.trial = None  # the raise never ran: nothing to judge
        self.pending_us = None
        return self.delay_us


@dataclass
class _Trial:
    """A raise under judgement: the delays and the window that asked for it."""

    before_us: int
    after_us: int
    before: Observation
    windows: int = 0  # windows seen since the raise took effect


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"
