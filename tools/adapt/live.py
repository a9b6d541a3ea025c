"""Run the control law against a live server: watch windows, apply changes by reloading.

A change is applied through the model-control load API with a config override (the
server's own config with only `max_queue_delay_microseconds` changed). The reload runs
in a thread of its own so the window clock keeps ticking; while it is in flight the law
is asked for nothing new, and the windows around it are dropped (the reload resets the
statistics and its loading work competes for the same cores).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from tools.adapt.control import Controller, Decision
from tools.adapt.observe import observation, take_window_counters
from tools.repo.instances import instance_count
from tools.repo.model_config import ModelConfig, batching_problems
from tools.triton_client import TritonClient, TritonError

log = logging.getLogger("adapt")

MAX_STATS_FAILURES = 3


@dataclass(frozen=True)
class ReloadRecord:
    started_s: float
    seconds: float
    before_us: int
    after_us: int
    ok: bool
    error: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def with_delay(base: ModelConfig, delay_us: int) -> ModelConfig:
    """`base` with a new batching delay; nothing else changes."""
    config = ModelConfig()
    config.CopyFrom(base)
    config.dynamic_batching.max_queue_delay_microseconds = int(delay_us)
    problems = batching_problems(config)
    if problems:
        raise ValueError("; ".join(problems))
    return config


class LiveController:
    def __init__(
        self,
        client: TritonClient,
        model: str,
        base: ModelConfig,
        controller: Controller,
        window_s: float = 2.0,
        dry_run: bool = False,
        reload: Callable[[ModelConfig], None] | None = None,
    ) -> None:
        self.client, self.model, self.base, self.controller = client, model, base, controller
        self.window_s, self.dry_run = window_s, dry_run
        self.instances = instance_count(base)
        self.reload = reload or (lambda config: client.load(model, config))
        self.decisions: list[Decision] = []
        self.reloads: list[ReloadRecord] = []
        self.lock = threading.Lock()
        self.reload_thread: threading.Thread | None = None
        self.epoch = 0  # bumped when a reload starts or ends: windows across it are dropped
        self.t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def run(self, stop: threading.Event, duration_s: float | None = None) -> None:
        """Watch windows until `stop` is set or `duration_s` has passed; waits for a reload in flight."""
        failures = 0
        previous, epoch = take_window_counters(self.client, self.model, self.now()), self.epoch
        while not stop.wait(max(0.0, previous.at_s + self.window_s - self.now())):
            if duration_s is not None and self.now() >= duration_s:
                break
            try:
                current = take_window_counters(self.client, self.model, self.now())
                failures = 0
            except TritonError as exc:
                failures += 1
                log.warning("statistics unavailable (%s)", exc)
                if failures >= MAX_STATS_FAILURES:
                    raise
                continue
            with self.lock:
                valid = epoch == self.epoch and not self.controller.in_flight
                epoch = self.epoch
            window, previous = observation(previous, current, self.instances) if valid else None, current
            if window is None:
                log.debug("window at %.1f s dropped (a reload was in flight or reset the counters)", current.at_s)
                continue
            self.step(window, current.at_s)
        if self.reload_thread:
            self.reload_thread.join()

    def step(self, window, at_s: float) -> Decision:
        with self.lock:
            decision = self.controller.observe(window, at_s)
        self.decisions.append(decision)
        if not decision.changed:
            log.debug("[%6.1f s] %s", at_s, decision.describe())
            return decision
        if self.dry_run:
            log.info("[%6.1f s] dry run, would set %s", at_s, decision.describe())
            with self.lock:
                self.controller.reload_finished(True)
            return decision
        log.info("[%6.1f s] %s", at_s, decision.describe())
        with self.lock:
            self.epoch += 1
        self.reload_thread = threading.Thread(target=self.apply, args=(decision,), name="adapt-reload", daemon=True)
        self.reload_thread.start()
        return decision

    def apply(self, decision: Decision) -> None:
        started = self.now()
        error = ""
        try:
            self.reload(with_delay(self.base, decision.after_us))
        except (TritonError, ValueError) as exc:
            error = str(exc)
        seconds = self.now() - started
        with self.lock:
            kept = self.controller.reload_finished(not error)
            self.epoch += 1
        self.reloads.append(ReloadRecord(started, seconds, decision.before_us, decision.after_us, not error, error))
        if error:
            log.error("reload to %d us failed after %.1f s; keeping the last good delay %d us: %s", decision.after_us, seconds, kept, error)
        else:
            log.info("reload to %d us done in %.2f s", decision.after_us, seconds)
